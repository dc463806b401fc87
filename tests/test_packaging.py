"""Packaging: the folders core/ and mount/ ship as logfs.core and logfs.mount.

- The wheel, installed in a fresh virtual environment with only the runtime dependencies (plus the ``fuse`` extra,
  which logfs.mount needs to import), imports every module and runs ``logfs --help``. Modules that need the
  ``spark`` extra may fail to import only for want of it.
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

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
FOLDERS = {"logfs": "logfs", "logfs.core": "core", "logfs.mount": "mount"}


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
    assert setuptools["packages"] == list(FOLDERS)
    assert setuptools["package-dir"] == FOLDERS
    assert PYPROJECT["project"]["scripts"] == {"logfs": "logfs.cli:main"}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_wheel_installs_imports_and_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    # Build from a copy holding only what the wheel is made of, so that the build leaves nothing in the checkout
    # and a file the build needs but the copy lacks shows up here.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, source / name)
    for folder in FOLDERS.values():
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    wheels = tmp_path / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", wheels, source], cwd=tmp_path)
    (wheel,) = wheels.glob("logfs-*.whl")

    with zipfile.ZipFile(wheel) as archive:
        files = [n for n in archive.namelist() if ".dist-info/" not in n]
    assert {"logfs/__init__.py", "logfs/core/__init__.py", "logfs/mount/__init__.py", "logfs/py.typed"} <= set(files)
    assert all(f.startswith("logfs/") for f in files), f"files outside logfs/ in the wheel: {files}"
    for package, folder in FOLDERS.items():
        prefix = package.replace(".", "/") + "/"
        expected = {prefix + p.name for p in (ROOT / folder).glob("*.py")}
        assert expected <= set(files), f"{folder}/ modules missing from the wheel: {sorted(expected - set(files))}"

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", wheel], cwd=tmp_path)
    # Runtime dependencies plus the fuse extra; pip takes them from its cache when it can.
    runtime = PYPROJECT["project"]["dependencies"]
    fuse = PYPROJECT["project"]["optional-dependencies"]["fuse"]
    run([python, "-m", "pip", "install", "--quiet", *runtime, *fuse], cwd=tmp_path)

    spark_only = sorted(
        requirement_name(r).replace("-", "_") for r in PYPROJECT["project"]["optional-dependencies"]["spark"]
    )
    code = textwrap.dedent(
        f"""
        import importlib, json, pkgutil, sys
        import logfs
        spark_only = {spark_only!r}
        imported, missing_extra = [], {{}}
        for info in pkgutil.walk_packages(logfs.__path__, "logfs."):
            try:
                importlib.import_module(info.name)
            except ModuleNotFoundError as exc:
                if (exc.name or "").split(".")[0] not in spark_only:
                    raise
                missing_extra[info.name] = exc.name
            else:
                imported.append(info.name)
        print(json.dumps({{"file": logfs.__file__, "imported": imported, "missing_extra": missing_extra}}))
        """
    )
    report = json.loads(run([python, "-P", "-c", code], cwd=tmp_path).stdout)
    print(json.dumps(report, indent=2))
    assert Path(report["file"]).is_relative_to(env_dir), "the wheel's logfs was not the one imported"
    assert {"logfs.cli", "logfs.core", "logfs.mount"} <= set(report["imported"])
    assert not any(name.startswith("logfs.core") for name in report["missing_extra"])

    help_text = run([env_dir / "bin" / "logfs", "--help"], cwd=tmp_path).stdout
    assert "Usage: logfs" in help_text
    version = run([env_dir / "bin" / "logfs", "--version"], cwd=tmp_path).stdout
    assert version == f"logfs {PYPROJECT['project']['version']}\n"


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
    wanted: dict[str, str] = {}
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).glob("*.py")):
            module = package if path.name == "__init__.py" else f"{package}.{path.stem}"
            wanted[module] = str(path.resolve())
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
