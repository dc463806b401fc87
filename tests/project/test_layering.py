"""The layers stay apart: ``logfs.core`` never pulls in FUSE, trio, Spark, the mount or the CLI; ``logfs.mount`` uses
only ``logfs.core`` of logfs; ``import logfs`` stays light; the follower daemon never pulls in Spark; the Spark
package's pure modules (``offsets``, ``options``) import neither pyspark nor pyarrow.

Two checks, as trio's ``test_exports.py`` does: a dynamic one (import every module in a fresh interpreter and look at
``sys.modules``) and a static one (read every file's ``import`` statements with ``ast``, including imports inside
functions and under ``TYPE_CHECKING``, which the dynamic check cannot see).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Import names that the storage core must never load: the FUSE stack, Spark, and the layers above it.
CORE_FORBIDDEN_MODULES = ("pyfuse3", "trio", "pyspark", "pyarrow", "logfs.mount", "logfs.cli")
SPARK_MODULES = ("pyspark", "pyarrow")
# The core's subpackages, one per concern: each must be walked by both checks.
CORE_SUBPACKAGES = ("cext", "format", "log", "txn", "replication")


def run_python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # A neutral working directory: what is checked is the installed package (tests/project/test_packaging.py checks the
    # source tree too).
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_importing_every_core_module_loads_no_fuse_spark_mount_or_cli(tmp_path: Path) -> None:
    code = f"""
        import importlib, json, pkgutil, sys
        forbidden = {CORE_FORBIDDEN_MODULES!r}

        def loaded():
            return {{name for name in sys.modules if any(name == f or name.startswith(f + ".") for f in forbidden)}}

        import logfs.core
        culprits = {{}}
        seen = loaded()
        if seen:
            culprits["logfs.core"] = sorted(seen)
        modules = ["logfs.core"]
        for info in pkgutil.walk_packages(logfs.core.__path__, "logfs.core."):
            importlib.import_module(info.name)
            modules.append(info.name)
            new = loaded() - seen
            if new:
                culprits[info.name] = sorted(new)
                seen |= new
        print(json.dumps({{"modules": modules, "culprits": culprits}}))
    """
    proc = run_python(code, tmp_path)
    assert proc.returncode == 0, f"importing logfs.core's modules failed:\n{proc.stderr}"
    report = json.loads(proc.stdout)
    print("imported:", ", ".join(report["modules"]))
    assert report["culprits"] == {}, f"logfs.core modules loaded forbidden modules (module -> loaded): {report}"
    # Every file of the core was imported, those of its subpackages included.
    assert set(report["modules"]) >= {module_name(path) for path in python_files("core")}


def loaded_after_importing(modules: list[str], watched: tuple[str, ...], tmp_path: Path) -> dict[str, list[str]]:
    """Import ``modules`` one by one in a fresh interpreter: for each, the ``watched`` modules it loaded."""
    code = f"""
        import importlib, json, sys
        watched = {watched!r}

        def loaded():
            return {{name for name in sys.modules if any(name == w or name.startswith(w + ".") for w in watched)}}

        culprits = {{}}
        for name in {modules!r}:
            importlib.import_module(name)
            culprits[name] = sorted(loaded())
        print(json.dumps(culprits))
    """
    proc = run_python(code, tmp_path)
    assert proc.returncode == 0, f"importing {modules} failed:\n{proc.stderr}"
    return json.loads(proc.stdout)


def test_the_pure_spark_modules_load_neither_pyspark_nor_pyarrow(tmp_path: Path) -> None:
    """``logfs.spark.offsets`` and ``logfs.spark.options`` are offset and option arithmetic: they import (and pull in,
    through ``logfs/spark/__init__.py``) neither pyspark nor pyarrow."""
    loaded = loaded_after_importing(["logfs.spark.offsets", "logfs.spark.options"], SPARK_MODULES, tmp_path)
    assert loaded == {"logfs.spark.offsets": [], "logfs.spark.options": []}


def test_the_spark_package_still_exports_its_data_source_lazily(tmp_path: Path) -> None:
    """What the lazy exports of ``logfs/spark/__init__.py`` keep working: ``from logfs.spark import LogfsDataSource``
    after the pure modules, and every name of ``__all__``."""
    code = """
        import sys
        import logfs.spark.offsets, logfs.spark.options
        assert "pyspark" not in sys.modules
        from logfs.spark import LogfsDataSource
        import logfs.spark
        assert LogfsDataSource.name() == "logfs"
        for name in logfs.spark.__all__:
            getattr(logfs.spark, name)
        print("ok")
    """
    proc = run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_importing_every_follower_module_loads_no_spark(tmp_path: Path) -> None:
    modules = [module_name(path) for path in python_files("logfs/follower")]
    assert "logfs.follower.daemon" in modules
    loaded = loaded_after_importing(modules, SPARK_MODULES, tmp_path)
    assert loaded == {name: [] for name in modules}


def test_import_logfs_is_light(tmp_path: Path) -> None:
    """``import logfs`` (run first by every ``import logfs.core``) loads no subpackage and no third-party library."""
    code = """
        import json, sys
        before = set(sys.modules)
        import logfs
        heavy = ("logfs.", "numpy", "click", "crc32c", "cramjam", "pyfuse3", "trio", "pyspark", "pyarrow")
        print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith(heavy))))
    """
    proc = run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_the_umount_command_loads_neither_fuse_nor_trio_nor_the_store(tmp_path: Path) -> None:
    """``logfs umount`` runs one ``fusermount3``: its modules (``mount/fusermount.py``, ``mount/holders.py``) must not
    pull in pyfuse3, trio or the store (they did through ``mount/server.py``: 0.7 s of imports per unmount)."""
    watched = ("pyfuse3", "trio", "logfs.core.store", "logfs.mount.server", "numpy")
    loaded = loaded_after_importing(["logfs.cli", "logfs.mount.fusermount", "logfs.mount.holders"], watched, tmp_path)
    assert loaded == {"logfs.cli": [], "logfs.mount.fusermount": [], "logfs.mount.holders": []}


# --- static check -------------------------------------------------------------------------------------------------


def module_name(path: Path) -> str:
    """The import name of a file in core/, mount/ or logfs/ (core/a/b.py -> logfs.core.a.b; a package's
    __init__.py -> the package)."""
    package = package_of(path)
    return package if path.name == "__init__.py" else f"{package}.{path.stem}"


def package_of(path: Path) -> str:
    """The import name of the package a file in core/, mount/ or logfs/ belongs to (core/a/b.py -> logfs.core.a)."""
    relative = path.relative_to(ROOT)
    top = {"core": "logfs.core", "mount": "logfs.mount", "logfs": "logfs"}[relative.parts[0]]
    return ".".join([top, *relative.parts[1:-1]])


def imported_names(source: str, package: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """Every module name ``source`` imports, as (line, absolute name); relative imports are resolved against
    ``package``; ``from p import x`` yields both ``p`` and ``p.x`` (x may be a submodule)."""
    names: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            names.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                assert node.module is not None
                base = node.module
            else:
                parts = package.split(".")
                assert node.level <= len(parts), f"{filename}:{node.lineno}: relative import beyond the top package"
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            names.append((node.lineno, base))
            names.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and (dynamic := _dynamic_import_name(node)) is not None:
            names.append((node.lineno, dynamic))
    return names


def _dynamic_import_name(node: ast.Call) -> str | None:
    """The literal name in ``importlib.import_module("x")`` or ``__import__("x")``, else None."""
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if called in ("import_module", "__import__") and node.args:
        first = node.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def file_imports(path: Path) -> list[tuple[int, str]]:
    return imported_names(path.read_text(encoding="utf-8"), package_of(path), str(path))


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def python_files(folder: str) -> list[Path]:
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def core_violation(name: str) -> bool:
    if within(name, "logfs"):
        # The core may use itself and the light top package (logfs.__version__), nothing else of logfs.
        return not (name == "logfs" or name == "logfs.__version__" or within(name, "logfs.core"))
    return any(within(name, forbidden) for forbidden in ("pyfuse3", "trio", "pyspark", "pyarrow"))


# Below the log's read API (core/log/rangeread.py, core/log/storedbatches.py): a reader above the log never frames,
# checks or reads a segment's bytes itself (issue 25).
LOG_INTERNALS = ("segment", "logfile", "recovery", "batchcheck", "scan")


def mount_violation(name: str) -> bool:
    if any(within(name, f"logfs.core.log.{internal}") for internal in LOG_INTERNALS):
        return True
    if within(name, "logfs"):
        return not (
            name == "logfs" or name == "logfs.__version__" or within(name, "logfs.core") or within(name, "logfs.mount")
        )
    return False


@pytest.mark.parametrize("path", python_files("core"), ids=lambda p: str(p.relative_to(ROOT)))
def test_core_file_imports_no_fuse_spark_mount_or_cli(path: Path) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: imports {name}" for line, name in file_imports(path) if core_violation(name)
    ]
    assert bad == [], "logfs.core must not import the FUSE stack, Spark or other layers of logfs:\n" + "\n".join(bad)


def test_the_static_check_covers_every_core_subpackage() -> None:
    folders = {path.parent.relative_to(ROOT / "core").as_posix() for path in python_files("core")}
    assert folders >= {".", *CORE_SUBPACKAGES}
    assert all((ROOT / "core" / sub / "__init__.py").is_file() for sub in CORE_SUBPACKAGES)


def spark_violation(name: str) -> bool:
    return any(within(name, forbidden) for forbidden in SPARK_MODULES)


PURE_SPARK_FILES = [ROOT / "logfs" / "spark" / "offsets.py", ROOT / "logfs" / "spark" / "options.py"]


@pytest.mark.parametrize(
    "path", PURE_SPARK_FILES + python_files("logfs/follower"), ids=lambda p: str(p.relative_to(ROOT))
)
def test_pure_spark_and_follower_files_import_no_spark(path: Path) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: imports {name}" for line, name in file_imports(path) if spark_violation(name)
    ]
    assert bad == [], "the follower and logfs.spark's offsets and options must not import pyspark or pyarrow:\n" + (
        "\n".join(bad)
    )


@pytest.mark.parametrize("path", python_files("mount"), ids=lambda p: str(p.relative_to(ROOT)))
def test_mount_file_imports_only_core_of_logfs(path: Path) -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{line}: imports {name}" for line, name in file_imports(path) if mount_violation(name)
    ]
    assert bad == [], (
        "logfs.mount may import only logfs.core (and itself) of logfs, and not the log's segments, files, recovery, "
        "batch checks or scan (it reads through Log.read_range):\n" + "\n".join(bad)
    )


def test_static_checker_sees_the_imports_it_must_refuse() -> None:
    """The checker itself: each forbidden form is caught, relative and dynamic imports included."""
    source = textwrap.dedent(
        """
        import pyfuse3
        from trio import lowlevel
        from ..mount import tree
        from logfs import cli
        from . import batch
        import importlib
        importlib.import_module("pyspark.sql")

        def later():
            import logfs.mount.ops
        """
    )
    names = [name for _, name in imported_names(source, "logfs.core")]
    assert sorted({name for name in names if core_violation(name)}) == [
        "logfs.cli",
        "logfs.mount",
        "logfs.mount.ops",
        "logfs.mount.tree",
        "pyfuse3",
        "pyspark.sql",
        "trio",
        "trio.lowlevel",
    ]
    assert "logfs.core.batch" in names
    assert not core_violation("logfs.core.batch")
    assert mount_violation("logfs.cli")
    assert not mount_violation("logfs.core.errors")
    assert not mount_violation("pyfuse3")
