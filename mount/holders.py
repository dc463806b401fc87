"""Which processes keep a mount point busy: the names ``logfs umount`` gives when the unmount fails with EBUSY.

A mount point is busy while a process has a file under it open, its working directory or root directory there.
Linux shows all three as symbolic links in ``/proc/<pid>/fd/*``, ``/proc/<pid>/cwd`` and ``/proc/<pid>/root``;
reading those links asks the kernel for the path it already holds and sends no request to the FUSE daemon, so
this works on a mount whose daemon is slow or stuck. (``fuser -m`` answers the same question but stats the
mount point through the filesystem, and it is not installed everywhere.) Processes of other users are invisible
without privileges: the list may be incomplete, never wrong.

A process can also hold the mount with no descriptor at all: a thread inside a path system call under it, waiting
for the daemon's answer, keeps the mount busy until the call returns. ``logfs follow`` is the common case (issue 23
item 7): it spends nearly all its time inside ``open()`` of a leader's fetch file, whose lookup waits up to 500 ms
for new records (logfs/follower/fetch.py), and between fetches it holds nothing. Such a thread shows in
``/proc/<pid>/task/<tid>/syscall`` as the system call's number and arguments; the path is read from the process's
memory (``/proc/<pid>/mem``, at the argument's address) and resolved against the directory descriptor or working
directory the call names. Both files need the right to trace the process (same user, and Yama's ptrace_scope 0, or
root). Without it, a process with a thread waiting for a FUSE daemon's answer (``/proc/<pid>/task/<tid>/wchan``,
which needs no such right, names the kernel's ``request_wait_answer``) is still listed, marked uncertain
(``Holder.certain`` False): it may be waiting on this mount or on another FUSE filesystem. Every holder is named
with its command line, so a ``logfs follow LEADER …`` is recognisable at once.

Threads: any (blocking procfs reads; the CLI's main thread calls it).
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Holder:
    """One process holding a mount point: its pid, command name, what it holds (its working or root directory, an
    open file, or a system call waiting on a path, each named from the mount point's own name down) and its command
    line (empty when unreadable). ``certain`` is False for a process that only may hold it: one waiting on some FUSE
    filesystem, where this user may not read which."""

    pid: int
    command: str
    holds: tuple[str, ...]
    command_line: str = ""
    certain: bool = True

    def __str__(self) -> str:
        text = f"{self.pid} ({self.command}): {', '.join(self.holds)}"
        return f"{text}; command line: {self.command_line}" if self.command_line else text


def mount_path(mountpoint: Path) -> str:
    """The absolute path of ``mountpoint`` as ``/proc`` links spell it, without touching the mount itself (only
    its parent is resolved)."""
    absolute = Path(os.path.abspath(mountpoint))
    return os.path.join(os.path.realpath(absolute.parent), absolute.name)


def holders(mountpoint: Path, proc: Path = Path("/proc")) -> list[Holder]:
    """Every process (that this user may inspect) holding ``mountpoint`` busy, by pid; then, uncertain, those that
    wait on a FUSE filesystem this user cannot tell apart from this one."""
    root = mount_path(mountpoint)
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        holds = [_describe(what, target, root) for what, target in _links(entry)
                 if _under(target, root)]  # fmt: skip
        pending, unresolved = _pending_paths(entry)
        holds += [f"waiting in {call}() on {_inside(path, root)}" for call, path in pending
                  if _under(path, root)]  # fmt: skip
        if holds:
            found.append(Holder(int(entry.name), _command(entry), tuple(dict.fromkeys(holds)), _command_line(entry)))
        elif unresolved:
            found.append(Holder(int(entry.name), _command(entry), (UNCERTAIN_HOLD,), _command_line(entry), False))
    return sorted(found, key=lambda h: (not h.certain, h.pid))


UNCERTAIN_HOLD = "waiting for an answer from a FUSE filesystem, this one or another (this user may not read which)"


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def _inside(path: str, root: str) -> str:
    """``path`` named from the mount point's own name down: ``mnt/t/0/at/5``."""
    return os.path.normpath(os.path.join(os.path.basename(root), os.path.relpath(path, root)))


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
    return "open " + _inside(target, root)


def _command(pid_dir: Path) -> str:
    try:
        return (pid_dir / "comm").read_text().strip()
    except OSError:
        return "?"


COMMAND_LINE_CHARS_MAX = 300  # a holder's line stays readable; the start of a command line names it


def _command_line(pid_dir: Path) -> str:
    """The process's arguments joined by spaces (``/proc/<pid>/cmdline``), cut at COMMAND_LINE_CHARS_MAX."""
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        return ""
    text = " ".join(arg.decode(errors="replace") for arg in raw.rstrip(b"\0").split(b"\0"))
    return text if len(text) <= COMMAND_LINE_CHARS_MAX else text[: COMMAND_LINE_CHARS_MAX - 1] + "…"


# System calls that walk a path and may wait there on a FUSE daemon: number -> (name, index of the directory
# descriptor argument or None for a path relative to the working directory, index of the path argument). The
# numbers are the kernel's (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h).
_AT = None
_PATH_CALLS: dict[str, dict[int, tuple[str, int | None, int]]] = {
    "x86_64": {
        2: ("open", _AT, 0), 4: ("stat", _AT, 0), 6: ("lstat", _AT, 0), 21: ("access", _AT, 0),
        59: ("execve", _AT, 0), 80: ("chdir", _AT, 0), 83: ("mkdir", _AT, 0), 84: ("rmdir", _AT, 0),
        87: ("unlink", _AT, 0), 89: ("readlink", _AT, 0), 191: ("getxattr", _AT, 0), 192: ("lgetxattr", _AT, 0),
        257: ("openat", 0, 1), 258: ("mkdirat", 0, 1), 262: ("newfstatat", 0, 1), 263: ("unlinkat", 0, 1),
        267: ("readlinkat", 0, 1), 269: ("faccessat", 0, 1), 332: ("statx", 0, 1), 437: ("openat2", 0, 1),
        439: ("faccessat2", 0, 1),
    },
    "aarch64": {
        8: ("getxattr", _AT, 0), 9: ("lgetxattr", _AT, 0), 34: ("mkdirat", 0, 1), 35: ("unlinkat", 0, 1),
        48: ("faccessat", 0, 1), 49: ("chdir", _AT, 0), 56: ("openat", 0, 1), 78: ("readlinkat", 0, 1),
        79: ("newfstatat", 0, 1), 221: ("execve", _AT, 0), 291: ("statx", 0, 1), 437: ("openat2", 0, 1),
        439: ("faccessat2", 0, 1),
    },
}  # fmt: skip
AT_FDCWD = -100
PATH_BYTES_MAX = 4096  # PATH_MAX


def _pending_paths(pid_dir: Path) -> tuple[list[tuple[str, str]], bool]:
    """(system call, absolute path) of each thread of the process that is inside a path system call, and whether
    some thread waits for a FUSE answer whose path could not be read (not ours to trace, or an architecture
    without a table above). Nothing when the process is gone."""
    calls = _PATH_CALLS.get(platform.machine(), {})
    found = []
    unresolved = False
    try:
        tasks = os.listdir(pid_dir / "task")
    except OSError:
        return [], False
    for tid in tasks:
        task = pid_dir / "task" / tid
        try:
            fields = syscall_fields(task)
        except OSError:
            unresolved = unresolved or _waits_on_fuse(task)
            continue
        # "<nr> <arg0> … <arg5> <sp> <pc>" while blocked in a call; "running" or "-1 …" otherwise.
        if len(fields) < 7 or not fields[0].isdigit() or int(fields[0]) not in calls:
            unresolved = unresolved or (not calls and _waits_on_fuse(task))
            continue
        name, dir_arg, path_arg = calls[int(fields[0])]
        path = _read_path(pid_dir, int(fields[1 + path_arg], 16))
        if path is not None and not path.startswith("/"):
            base = _base_directory(pid_dir, None if dir_arg is None else int(fields[1 + dir_arg], 16))
            path = None if base is None else os.path.join(base, path)
        if path is None:
            unresolved = unresolved or _waits_on_fuse(task)
            continue
        found.append((name, os.path.normpath(path)))
    return found, unresolved


def syscall_fields(task_dir: Path) -> list[str]:
    """``/proc/<pid>/task/<tid>/syscall`` split; OSError (EACCES) where this user may not trace the process."""
    return (task_dir / "syscall").read_text().split()


def _waits_on_fuse(task_dir: Path) -> bool:
    """The thread sleeps in the kernel waiting for a FUSE daemon's answer (its wchan, readable without tracing)."""
    try:
        wchan = (task_dir / "wchan").read_text()
    except OSError:
        return False
    return "request_wait_answer" in wchan or "fuse" in wchan


def _read_path(pid_dir: Path, address: int) -> str | None:
    """The NUL-terminated path at ``address`` in the process's memory; None when unreadable."""
    try:
        with open(pid_dir / "mem", "rb", buffering=0) as mem:
            mem.seek(address)
            raw = mem.read(PATH_BYTES_MAX)
    except (OSError, OverflowError, ValueError):
        return None
    end = raw.find(b"\0") if raw else -1
    return os.fsdecode(raw[:end]) if end > 0 else None


def _base_directory(pid_dir: Path, dirfd: int | None) -> str | None:
    """The directory a relative path starts from: the working directory (AT_FDCWD, or a call without a directory
    argument) or the directory descriptor's target."""
    if dirfd is not None:
        dirfd &= 0xFFFFFFFF  # an int argument: only the register's low 32 bits count (AT_FDCWD shows as 0xffffff9c)
        if dirfd >= 1 << 31:
            dirfd -= 1 << 32
    try:
        if dirfd is None or dirfd == AT_FDCWD:
            return os.readlink(pid_dir / "cwd")
        return os.readlink(pid_dir / "fd" / str(dirfd))
    except OSError:
        return None
