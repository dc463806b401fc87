"""Which processes keep a mount point busy: the names ``logfs umount`` gives when the unmount fails with EBUSY.

A mount point is busy while a process has a file under it open, its working directory or root directory there.
Linux shows all three as symbolic links in ``/proc/<pid>/fd/*``, ``/proc/<pid>/cwd`` and ``/proc/<pid>/root``;
reading those links asks the kernel for the path it already holds and sends no request to the FUSE daemon, so
this works on a mount whose daemon is slow or stuck. (``fuser -m`` answers the same question but stats the
mount point through the filesystem, and it is not installed everywhere.) Processes of other users are invisible
without privileges: the list may be incomplete, never wrong.

Threads: any (blocking procfs reads; the CLI's main thread calls it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Holder:
    """One process holding a mount point: its pid, command name, and what it holds (its working or root directory,
    or an open file, named from the mount point's own name down)."""

    pid: int
    command: str
    holds: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.pid} ({self.command}): {', '.join(self.holds)}"


def mount_path(mountpoint: Path) -> str:
    """The absolute path of ``mountpoint`` as ``/proc`` links spell it, without touching the mount itself (only
    its parent is resolved)."""
    absolute = Path(os.path.abspath(mountpoint))
    return os.path.join(os.path.realpath(absolute.parent), absolute.name)


def holders(mountpoint: Path, proc: Path = Path("/proc")) -> list[Holder]:
    """Every process (that this user may inspect) holding ``mountpoint`` busy, by pid."""
    root = mount_path(mountpoint)
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        holds = [_describe(what, target, root) for what, target in _links(entry)
                 if target == root or target.startswith(root + "/")]  # fmt: skip
        if holds:
            found.append(Holder(int(entry.name), _command(entry), tuple(holds)))
    return sorted(found, key=lambda h: h.pid)


def _links(pid_dir: Path) -> list[tuple[str, str]]:
    """(what, target) of a process's cwd, root and open files; empty when it is gone or not ours to read."""
    links = []
    for name in ("cwd", "root"):
        try:
            links.append((name, os.readlink(pid_dir / name)))
        except OSError:
            pass
    try:
        fds = os.listdir(pid_dir / "fd")
    except OSError:
        return links
    for fd in fds:
        try:
            target = os.readlink(pid_dir / "fd" / fd)
        except OSError:
            continue
        links.append(("fd", target))
    return links


def _describe(what: str, target: str, root: str) -> str:
    """``working directory``, ``root directory`` or ``open MOUNT/<path>``."""
    if what == "cwd":
        return "working directory"
    if what == "root":
        return "root directory"
    return "open " + os.path.join(os.path.basename(root), os.path.relpath(target, root))


def _command(pid_dir: Path) -> str:
    try:
        return (pid_dir / "comm").read_text().strip()
    except OSError:
        return "?"
