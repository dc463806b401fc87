"""Packaging: the folders core/ and mount/ ship as logfs.core and logfs.mount, and every module imports from
anywhere — the checkout itself included, without ``-P`` — in the three ways logfs is installed.

- The wheel, installed in a fresh virtual environment with only the runtime dependencies (plus the ``fuse`` extra,
  which logfs.mount needs to import), imports every module and runs ``logfs --help``. Modules that need the
  ``spark`` extra (or the ``cluster`` extra: kazoo, for logfs.cluster.zksession) may fail to import only for want
  of it. It holds the compiled record walker (setup.py); a wheel
  built without a compiler lacks it and works the same on the pure-Python walker.
- The development environment's editable install is strict and maps logfs.core to the checkout's core/ folder,
  and every module in the checkout is importable (a strict install links files one by one: a module added since the
  last ``scripts/setup`` is missing until it runs again).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
FOLDERS = {"logfs": "logfs", "logfs.core": "core", "logfs.mount": "mount"}


def source_modules() -> dict[str, Path]:
    """Every module of the checkout by import name (subpackages included), with its file."""
    modules: dict[str, Path] = {}
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path.resolve()
    return modules


def source_packages() -> list[str]:
    return [name for name, path in source_modules().items() if path.name == "__init__.py"]


# Imports every module named in argv[1] (a JSON list) and prints where each came from; a module that needs a missing
# extra (spark: pyspark, pyarrow; cluster: kazoo) is reported apart, any other failure is an error.
IMPORT_EVERY_MODULE = textwrap.dedent(
    """
    import importlib, json, sys
    extra_only = ("pyspark", "pyarrow", "py4j", "kazoo")
    found, missing_extra = {}, {}
    for name in json.loads(sys.argv[1]):
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] not in extra_only:
                raise
            missing_extra[name] = exc.name
        else:
            found[name] = module.__file__
    print(json.dumps({"found": found, "missing_extra": missing_extra}))
    """
)


def import_every_module(python: Path, cwd: Path, safe_path: bool = False) -> dict[str, dict[str, str]]:
    args: list[str | Path] = [python, *(["-P"] if safe_path else []), "-c", IMPORT_EVERY_MODULE]
    env_free = run([*args, json.dumps(list(source_modules()))], cwd=cwd)
    report: dict[str, dict[str, str]] = json.loads(env_free.stdout)
    return report


def requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert match, requirement
    return match.group(0).lower().replace("_", "-")


def run(args: list[str | Path], cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_pyproject_maps_the_three_folders() -> None:
    setuptools = PYPROJECT["tool"]["setuptools"]
    assert sorted(setuptools["packages"]) == sorted(source_packages()), "pyproject.toml must list every subpackage"
    assert setuptools["package-dir"] == FOLDERS
    assert PYPROJECT["project"]["scripts"] == {"logfs": "logfs.cli:main"}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_wheel_installs_imports_and_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    # Build from a copy holding only what the wheel is made of, so that the build leaves nothing in the checkout
    # and a file the build needs but the copy lacks shows up here.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, source / name)
    for folder in FOLDERS.values():
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    wheels = tmp_path / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", wheels, source], cwd=tmp_path)
    (wheel,) = wheels.glob("logfs-*.whl")
    # The same sources without a working compiler: the optional extension is left out, the wheel still builds.
    shutil.rmtree(source / "build", ignore_errors=True)  # (the first build's compiled objects)
    plain_wheels = tmp_path / "plain-wheels"
    no_compiler = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", plain_wheels, source]
    run(["env", "CC=false", "LDSHARED=false", *no_compiler], cwd=tmp_path)
    (plain_wheel,) = plain_wheels.glob("logfs-*.whl")

    with zipfile.ZipFile(wheel) as archive:
        files = [n for n in archive.namelist() if ".dist-info/" not in n]
    with zipfile.ZipFile(plain_wheel) as archive:
        plain_files = [n for n in archive.namelist() if ".dist-info/" not in n]
    extension = [f for f in files if f.startswith("logfs/core/cext/_helpers.") and f.endswith(".so")]
    assert len(extension) == 1, f"the compiled helpers are not in the wheel: {files}"
    assert not [f for f in plain_files if f.endswith(".so")], plain_files
    assert set(plain_files) == set(files) - set(extension)
    assert {"logfs/__init__.py", "logfs/core/__init__.py", "logfs/mount/__init__.py", "logfs/py.typed"} <= set(files)
    assert all(f.startswith("logfs/") for f in files), f"files outside logfs/ in the wheel: {files}"
    expected = {name.replace(".", "/") + ("/__init__.py" if path.name == "__init__.py" else ".py")
                for name, path in source_modules().items()}
    assert expected <= set(files), f"modules missing from the wheel: {sorted(expected - set(files))}"

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", wheel], cwd=tmp_path)
    # Runtime dependencies plus the fuse extra; pip takes them from its cache when it can.
    runtime = PYPROJECT["project"]["dependencies"]
    fuse = PYPROJECT["project"]["optional-dependencies"]["fuse"]
    run([python, "-m", "pip", "install", "--quiet", *runtime, *fuse], cwd=tmp_path)

    # From anywhere else, the wheel's modules are the ones imported; from the source tree itself (a user's checkout,
    # no -P), the tree's own modules are, through logfs/__init__.py's finder.
    report = import_every_module(python, tmp_path)
    print(json.dumps(report, indent=2))
    assert all(Path(f).is_relative_to(env_dir) for f in report["found"].values()), "not the wheel's modules"
    assert {"logfs.cli", "logfs.core", "logfs.mount", "logfs.core.log.log"} <= set(report["found"])
    assert set(report["found"]) | set(report["missing_extra"]) == set(source_modules())
    assert not any(name.startswith(("logfs.core", "logfs.mount")) for name in report["missing_extra"])
    in_tree = import_every_module(python, source)
    assert all(Path(f).is_relative_to(source) for f in in_tree["found"].values()), "not the source tree's modules"
    assert set(in_tree["found"]) == set(report["found"])

    help_text = run([env_dir / "bin" / "logfs", "--help"], cwd=tmp_path).stdout
    assert "Usage: logfs" in help_text
    version = run([env_dir / "bin" / "logfs", "--version"], cwd=tmp_path).stdout
    assert version == f"logfs {PYPROJECT['project']['version']}\n"

    # The record walk: compiled in this wheel; the pure-Python fallback in the one built without a compiler (and
    # with LOGFS_NO_CEXT=1). Either way a batch validates and a damaged one is refused with the same message.
    assert run([python, "-c", WALKER_CHECK], cwd=tmp_path).stdout == "compiled\n"
    assert run(["env", "LOGFS_NO_CEXT=1", python, "-c", WALKER_CHECK], cwd=tmp_path).stdout == "python\n"
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", plain_wheel], cwd=tmp_path)
    assert run([python, "-c", WALKER_CHECK], cwd=tmp_path).stdout == "python\n"
    plain_report = import_every_module(python, tmp_path)
    assert set(plain_report["found"]) == set(report["found"])


# Which record walker records.walk uses, after checking that it validates a batch and refuses a damaged one.
WALKER_CHECK = textwrap.dedent(
    """
    from logfs.core import cext
    from logfs.core.errors import InvalidRecord
    from logfs.core.format import records
    from logfs.core.format.encode import encode_values
    batch = encode_values([b"a" * n for n in range(40)], 1)
    assert records.walk(batch, 61, len(batch), 40, 39, client=True)[0] == 0
    try:
        records.walk(batch + b"x", 61, len(batch) + 1, 40, 39, client=True)
    except InvalidRecord as exc:
        assert str(exc) == "1 trailing bytes after the 40 records the batch declares", exc
    else:
        raise AssertionError("trailing byte accepted")
    print("compiled" if cext.USE_CEXT else "python")
    """
)


def test_editable_install_maps_logfs_core_to_the_checkout_folders(tmp_path: Path) -> None:
    python = ROOT / ".venv" / "bin" / "python"
    assert python.exists(), "no .venv: run scripts/setup"
    code = textwrap.dedent(
        """
        import importlib.util, json, os, sys
        from importlib import metadata
        wanted = json.loads(sys.argv[1])
        found = {}
        for name in wanted:
            spec = importlib.util.find_spec(name)
            found[name] = os.path.realpath(spec.origin) if spec and spec.origin else None
        core_origin = importlib.util.find_spec("logfs.core").origin
        direct_url = json.loads(metadata.distribution("logfs").read_text("direct_url.json") or "{}")
        print(json.dumps({"found": found, "core_origin": core_origin, "direct_url": direct_url,
                          "version": metadata.version("logfs")}))
        """
    )
    wanted = {name: str(path) for name, path in source_modules().items()}
    report = json.loads(run([python, "-P", "-c", code, json.dumps(list(wanted))], cwd=tmp_path).stdout)

    assert report["version"] == PYPROJECT["project"]["version"]
    assert report["direct_url"].get("dir_info", {}).get("editable") is True, report["direct_url"]
    assert report["direct_url"].get("url") == ROOT.as_uri(), report["direct_url"]
    # Strict mode: a link tree under build/__editable__.*, reached through a plain path entry that mypy follows
    # (the default mode's import hook would resolve to core/ as well, but mypy could not see logfs.core).
    assert "/build/__editable__.logfs-" in report["core_origin"], f"not a strict editable install: {report}"
    assert report["found"]["logfs.core"] == str((ROOT / "core" / "__init__.py").resolve())
    assert report["found"]["logfs.mount"] == str((ROOT / "mount" / "__init__.py").resolve())
    wrong = {m: (report["found"][m], p) for m, p in wanted.items() if report["found"][m] != p}
    assert wrong == {}, (
        f"modules not (or wrongly) installed, run scripts/setup again (module: found, expected): {wrong}"
    )


def test_every_module_imports_in_the_checkout_without_safe_path() -> None:
    """A Python started in the project directory (sys.path[0] is the checkout, so ``logfs`` is the bare folder
    ``logfs/``) imports every module, and each one from the checkout's own files."""
    python = ROOT / ".venv" / "bin" / "python"
    report = import_every_module(python, ROOT)
    assert report["missing_extra"] == {}
    found = {name: str(Path(f).resolve()) for name, f in report["found"].items()}
    assert found == {name: str(path) for name, path in source_modules().items()}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_editable_install_in_pips_default_mode_imports_every_module_anywhere(tmp_path: Path) -> None:
    """pip's default editable mode maps the folders through an import hook; with it, every module imports from a
    neutral directory (-P) and from the checkout itself (no -P)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    for folder in FOLDERS.values():
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.so"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # The dependencies come from the development environment (a path entry), so that nothing is downloaded twice.
    (site_packages,) = (env_dir / "lib").glob("python3*/site-packages")
    (dev_site,) = (ROOT / ".venv" / "lib").glob("python3*/site-packages")
    (site_packages / "dev-deps.pth").write_text(f"{dev_site}\n", encoding="utf-8")
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", "-e", source], cwd=tmp_path)
    for cwd, safe_path in ((tmp_path, True), (source, False)):
        report = import_every_module(python, cwd, safe_path=safe_path)
        assert report["missing_extra"] == {}, report
        assert set(report["found"]) == set(source_modules())
        assert all(Path(f).resolve().is_relative_to(source) for f in report["found"].values()), report
