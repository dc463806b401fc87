"""The bookkeeping of the fault filesystem (tests/helpers/faultfs.py): the schedule's rules, and the record the
power-cut model keeps and applies (see tests/helpers/faultfs.py's docstring for both). Pure file and path work, no FUSE.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPS = ("pwrite", "fsync", "pread", "rename", "ftruncate", "create", "mkdir", "unlink", "fsyncdir")
POLL_S = 0.02
_log = logging.getLogger("faultfs")


# --- the schedule ---------------------------------------------------------------------------------------------------


@dataclass
class Rule:
    """One scheduled fault (see the module docstring); ``seen`` counts its matching calls."""

    op: str
    path: str = "*"
    nth: int = 1
    times: int = 1
    errno: str | None = "EIO"
    drop: str | None = None
    short: bool = False
    flip: bool = False
    seen: int = 0
    fired: int = 0

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"unknown op {self.op!r}")
        if self.errno is not None and self.errno not in ("EIO", "ENOSPC"):
            raise ValueError(f"unknown errno {self.errno!r}")
        if self.drop not in (None, "truncate", "zero"):
            raise ValueError(f"unknown drop {self.drop!r}")

    def hit(self, op: str, path: str) -> bool:
        """Count a call; True when this rule fires on it."""
        if op != self.op or not fnmatch.fnmatchcase(path, self.path):
            return False
        self.seen += 1
        if self.seen < self.nth or (self.times and self.fired >= self.times):
            return False
        self.fired += 1
        return True


@dataclass
class NameOp:
    """A name change in a directory, kept until that directory is fsynced (the power-cut model)."""

    seq: int
    kind: str  # create | mkdir | unlink | rmdir | rename
    dir_ino: int  # the directory that must be fsynced (a rename's target directory)
    name: str
    old_dir_ino: int = 0  # rename: where it came from
    old_name: str = ""
    trash: str | None = None  # unlink: the kept file; rename: the file it replaced


@dataclass
class FaultState:
    """Everything the faults and the power-cut model keep; pure bookkeeping over paths of ``source``."""

    source: Path
    trash: Path
    rules: list[Rule] = field(default_factory=list)
    fired: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OPS, 0))
    synced: dict[int, int] = field(default_factory=dict)  # underlying st_ino → size at its last fsync
    errors: dict[int, int] = field(default_factory=dict)  # underlying st_ino → writeback errors so far (errseq)
    dir_synced: dict[int, int] = field(default_factory=dict)  # directory st_ino → seq of its last fsyncdir
    name_ops: list[NameOp] = field(default_factory=list)
    seq: int = 0
    frozen: bool = False
    powercut: dict[str, Any] | None = None

    def rel(self, path: str) -> str:
        return os.path.relpath(path, self.source)

    def fault(self, op: str, path: str) -> Rule | None:
        """Count ``op`` on ``path``; the rule that fires on it, if any (recorded in ``fired``)."""
        self.counts[op] += 1
        rel = self.rel(path)
        for rule in self.rules:
            if rule.hit(op, rel):
                self.fired.append({"op": op, "path": rel, "errno": rule.errno, "seen": rule.seen})
                _log.info("fault: %s %s → %s", op, rel, rule.errno or ("short" if rule.short else "flip"))
                return rule
        return None

    def before_change(self, path: str, fd: int | None = None) -> None:
        """A file is about to be written or truncated: remember its size if it was never recorded (by its open
        descriptor when there is one: the path of an unlinked file names nothing)."""
        if self.frozen:
            raise OSError(errno.EIO, "faultfs is frozen (power cut)")
        st = os.fstat(fd) if fd is not None else os.stat(path)
        self.synced.setdefault(st.st_ino, st.st_size)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def record(self, op: NameOp) -> None:
        self.name_ops.append(op)

    def synced_dir(self, dir_ino: int, seq: int) -> None:
        """An fsyncdir that began at ``seq`` succeeded: every name op of that directory before it is durable (not
        one made while it ran: POSIX promises nothing for those); their trash can go."""
        self.dir_synced[dir_ino] = seq
        keep = []
        for op in self.name_ops:
            if op.dir_ino == dir_ino and op.seq < seq:
                if op.trash:
                    with contextlib.suppress(FileNotFoundError):
                        _remove(Path(op.trash))
            else:
                keep.append(op)
        self.name_ops = keep

    def cut(self, paths_of: Callable[[int], str | None]) -> dict[str, Any]:
        """The power cut (see the module docstring); ``paths_of`` maps a directory st_ino to its current path."""
        self.frozen = True
        undone: list[str] = []
        for op in reversed(self.name_ops):
            where = paths_of(op.dir_ino)
            if where is None:
                continue
            target = os.path.join(where, op.name)
            if op.kind in ("create", "mkdir"):
                if os.path.lexists(target):
                    _remove(Path(target))
                    undone.append(f"{op.kind} {self.rel(target)}")
            elif op.kind in ("unlink", "rmdir"):
                if not os.path.lexists(target):
                    if op.kind == "rmdir":
                        os.mkdir(target)
                    elif op.trash and os.path.lexists(op.trash):
                        os.rename(op.trash, target)
                    undone.append(f"{op.kind} {self.rel(target)}")
            elif op.kind == "rename":
                origin = paths_of(op.old_dir_ino)
                if origin is None or not os.path.lexists(target):
                    continue
                back = os.path.join(origin, op.old_name)
                if os.path.lexists(back):
                    continue
                os.rename(target, back)
                if op.trash and os.path.lexists(op.trash):
                    os.rename(op.trash, target)
                undone.append(f"rename {self.rel(back)} -> {self.rel(target)}")
        self.name_ops = []
        cut: dict[str, int] = {}
        for path in _walk_files(self.source):
            st = os.lstat(path)
            keep = self.synced.get(st.st_ino)
            if keep is not None and st.st_size > keep:
                os.truncate(path, keep)
                cut[self.rel(path)] = st.st_size - keep
        shutil.rmtree(self.trash, ignore_errors=True)
        self.powercut = {"undone": undone, "cut": cut}
        return self.powercut


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def _walk_files(root: Path) -> Iterator[str]:
    for top, _dirs, files in os.walk(root):
        for name in files:
            yield os.path.join(top, name)
