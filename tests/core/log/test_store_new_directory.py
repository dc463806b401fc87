"""Issue 23, point 3: ``Store.open`` makes a new store's own name durable, and costs an existing store nothing.

The power-cut proof is tests/faults/test_new_store_power_cut.py (through a real mount on the fault filesystem);
this checks which directories the open fsyncs: for a new store (absent, found empty, or without
``meta.properties``) every directory above it on its file system, for an existing one none above it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logfs.core import storedir
from logfs.core.store import Store
from logfs.core.storedir import META_PROPERTIES


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path of every directory (or file) fsynced from now on."""
    done: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        real(fd)
        done.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(storedir.os, "fsync", recording)
    return done


def _ancestors_on_device(path: Path) -> list[str]:
    device = os.stat(path).st_dev
    out = []
    for parent in path.resolve().parents:
        if os.stat(parent).st_dev != device:
            break
        out.append(str(parent))
    return out


@pytest.mark.parametrize("made", ["absent", "empty", "no meta.properties"])
def test_a_new_store_fsyncs_every_directory_above_it(tmp_path: Path, synced: list[str], made: str) -> None:
    root = tmp_path / "a" / "b" / "store"
    if made != "absent":
        root.mkdir(parents=True)
    if made == "no meta.properties":
        (root / ".lock").touch()  # an earlier first open that stopped before meta.properties
    Store.open(root).close()
    expected = _ancestors_on_device(root)
    assert str(tmp_path / "a" / "b") in expected and str(tmp_path) in expected
    assert all(d in synced for d in expected), f"not fsynced: {sorted(set(expected) - set(synced))}"


def test_an_existing_store_fsyncs_nothing_above_it(tmp_path: Path, synced: list[str]) -> None:
    root = tmp_path / "store"
    Store.open(root).close()
    assert (root / META_PROPERTIES).exists()
    synced.clear()
    Store.open(root).close()
    assert not [d for d in synced if not d.startswith(str(root))], synced
