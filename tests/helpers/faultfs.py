"""A fault-injecting passthrough filesystem for the storage-fault tests (issue 16), in the spirit of CORDS's errfs.

Test-only: the product never imports it. ``python tests/helpers/faultfs.py SOURCE MOUNTPOINT --control FILE`` serves the
directory ``SOURCE`` at ``MOUNTPOINT`` (pyfuse3 + trio, like mount/server.py) until unmounted; a logfs store then
lives on ``MOUNTPOINT`` and every pwrite, fsync, pread, rename, ftruncate, create, mkdir, unlink and fsyncdir the
store makes passes through here, where the schedule the test sets may fail it.

The schedule. The test writes JSON to the control file (atomically: ``FaultFS`` in tests/helpers/faultstore.py does it);
the filesystem polls it every :data:`POLL_S` and answers in ``FILE.status`` with the same ``gen``::

    {"gen": 3, "rules": [{"op": "fsync", "path": "*/*.log", "nth": 2, "times": 1, "errno": "EIO",
                          "drop": "truncate"}], "powercut": false}

A rule counts the calls of ``op`` (``pwrite``, ``fsync``, ``pread``, ``rename``, ``ftruncate``, ``create``, ``mkdir``,
``unlink`` (rmdir too), ``fsyncdir``) whose path relative to ``SOURCE`` matches the ``fnmatch`` glob ``path`` (``*``
matches ``/`` too; for a rename the source path); it fires on the ``nth`` match (1-based) and the ``times - 1``
matches after it (``times`` 0: every one from then on). Firing does, by op:

- any op with ``errno`` (``"EIO"`` or ``"ENOSPC"``): the call fails with it and changes nothing;
- ``pwrite`` with ``short``: only the first half of the bytes is stored and the short count returned;
- ``fsync`` with ``drop``: before the error, the file's unsynced bytes are dropped, as Linux may drop dirty pages
  after a failed writeback: ``"truncate"`` cuts the file back to its size at its last successful fsync, ``"zero"``
  keeps the size and zeroes every byte past that size. As Linux's errseq does, every other descriptor of the file
  then reports EIO once on its next fsync (an fsync running at that moment included), and only after that succeeds;
- ``pread`` with ``flip``: the call succeeds but one bit (0x10 of the middle byte) of what it returns is flipped.

Every fired fault is listed in the status (``fired``: op, path, errno), with per-op call counts (``counts``).
A new ``gen`` resets the counters of its rules.

The power-cut model (``"powercut": true``). The filesystem records, as it serves:

- for every file written or truncated through it, its size when its last successful fsync/fdatasync began (0 for a
  file created through it, the size at first change for a file that existed before; a truncation lowers it);
- every name created (file or directory), renamed or unlinked in a directory, in order, with whether an fsync of
  that directory (fsyncdir) began after it and succeeded. Unlinked files and files a rename replaced are kept in a
  trash directory beside ``SOURCE`` (``SOURCE.faultfs-trash``), and purged once their directory is fsynced.

A power cut first freezes the filesystem (every later change fails with EIO), then, walking the record backwards,
undoes every name operation whose directory (for a rename: the target's) was not fsynced after it — a created name
disappears (a directory with everything under it), a renamed one goes back (and what it replaced comes back), an
unlinked one comes back — and last cuts every file recorded to its size at its last fsync. This is the POSIX view
(no filesystem's journal ordering): a write is durable after fsync of the file, a name after fsync of its directory.
Overwrites within the synced length (mmap'ed index entries rewritten in place) are not rolled back: the model tracks
lengths, not contents. A file whose length shrank after its last fsync keeps its current length. The summary of
what the cut did is in the status (``powercut``).

Files: ``.log`` files (segments) are opened with ``direct_io``, so every read reaches the filesystem (and a fault);
the others without, so the store can ``mmap`` its index files (FUSE refuses a shared mapping of a direct_io file);
``keep_cache`` is off so each open re-reads what a fault changed. Attributes are never cached (timeouts 0).

Threads: the trio thread serves everything except fsync, which runs in a worker thread.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import shutil
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faultmodel import POLL_S, FaultState, NameOp, Rule

_log = logging.getLogger("faultfs")

# --- the filesystem -------------------------------------------------------------------------------------------------


def _operations_class() -> type:
    """The pyfuse3 Operations subclass, built on demand so that test modules import this file without pyfuse3."""
    import pyfuse3
    import trio

    def fuse_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
        """Any OSError of a handler becomes its errno (anything else would end the filesystem)."""

        async def wrapper(*args: Any) -> Any:
            try:
                return await fn(*args)
            except OSError as exc:
                raise pyfuse3.FUSEError(exc.errno or errno.EIO) from None
            except pyfuse3.FUSEError:
                raise
            except Exception:
                _log.exception("faultfs handler %s failed", fn.__name__)
                raise pyfuse3.FUSEError(errno.EIO) from None

        wrapper.__name__ = fn.__name__
        return wrapper

    def fail(rule: Rule) -> None:
        assert rule.errno is not None
        raise pyfuse3.FUSEError(getattr(errno, rule.errno))

    class FaultOperations(pyfuse3.Operations):  # type: ignore[misc]
        enable_writeback_cache = False

        def __init__(self, state: FaultState) -> None:
            super().__init__()
            self.state = state
            self.paths: dict[int, str] = {pyfuse3.ROOT_INODE: str(state.source)}
            self.root_ino = os.stat(state.source).st_ino
            self.fds: dict[int, tuple[int, int]] = {}  # fh → (fd, fuse inode)
            self.seen: dict[int, int] = {}  # fh → the file's writeback errors it has reported (Linux's errseq)
            self.dirs: dict[int, int] = {}  # dir fh → fuse inode
            self.next_fh = 1

        # inode bookkeeping: the FUSE inode is the underlying st_ino, the root's is ROOT_INODE
        def fuse_ino(self, st_ino: int) -> int:
            return pyfuse3.ROOT_INODE if st_ino == self.root_ino else st_ino

        def under_ino(self, inode: int) -> int:
            return self.root_ino if inode == pyfuse3.ROOT_INODE else inode

        def path(self, inode: int) -> str:
            try:
                return self.paths[inode]
            except KeyError:
                raise pyfuse3.FUSEError(errno.ENOENT) from None

        def child(self, parent: int, name: bytes) -> str:
            return os.path.join(self.path(parent), os.fsdecode(name))

        def path_of_dir(self, st_ino: int) -> str | None:
            path = self.paths.get(self.fuse_ino(st_ino))
            return path if path is not None and os.path.isdir(path) else None

        def entry(self, path: str) -> Any:
            st = os.lstat(path)
            inode = self.fuse_ino(st.st_ino)
            self.paths[inode] = path
            attr = pyfuse3.EntryAttributes()
            for name in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size", "st_blksize", "st_blocks"):
                setattr(attr, name, getattr(st, name))
            attr.st_ino = inode
            attr.st_atime_ns, attr.st_mtime_ns, attr.st_ctime_ns = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
            attr.entry_timeout = 0
            attr.attr_timeout = 0
            return attr

        def moved(self, old: str, new: str) -> None:
            """Paths of every inode under a renamed name follow it."""
            for inode, path in list(self.paths.items()):
                if path == old or path.startswith(old + os.sep):
                    self.paths[inode] = new + path[len(old) :]

        def file_info(self, fd: int, inode: int, path: str) -> Any:
            fh = self.next_fh
            self.next_fh += 1
            self.fds[fh] = (fd, inode)
            self.seen[fh] = self.state.errors.get(os.fstat(fd).st_ino, 0)
            return pyfuse3.FileInfo(fh=fh, direct_io=path.endswith(".log"), keep_cache=False)

        def change(self, op: str, path: str) -> None:
            """A name change (or a directory sync) is about to happen: its scheduled fault, or EIO once frozen."""
            if (rule := self.state.fault(op, path)) and rule.errno:
                fail(rule)
            if self.state.frozen:
                raise pyfuse3.FUSEError(errno.EIO)

        def trash_path(self) -> str:
            self.state.trash.mkdir(exist_ok=True)
            return str(self.state.trash / str(self.state.next_seq()))

        # --- names
        @fuse_errors
        async def lookup(self, parent_inode: int, name: bytes, ctx: Any) -> Any:
            return self.entry(self.child(parent_inode, name))

        @fuse_errors
        async def getattr(self, inode: int, ctx: Any) -> Any:
            return self.entry(self.path(inode))

        @fuse_errors
        async def setattr(self, inode: int, attr: Any, fields: Any, fh: int | None, ctx: Any) -> Any:
            path = self.path(inode)
            if fields.update_size:
                if (rule := self.state.fault("ftruncate", path)) and rule.errno:
                    fail(rule)
                self.state.before_change(path, self.fds[fh][0] if fh in self.fds else None)
                if fh is not None and fh in self.fds:
                    os.ftruncate(self.fds[fh][0], attr.st_size)
                else:
                    os.truncate(path, attr.st_size)
                st = os.stat(path) if fh not in self.fds else os.fstat(self.fds[fh][0])
                self.state.synced[st.st_ino] = min(self.state.synced[st.st_ino], attr.st_size)  # shorter until synced
            if fields.update_mode:
                os.chmod(path, stat.S_IMODE(attr.st_mode))
            if fields.update_atime or fields.update_mtime:
                st = os.lstat(path)
                atime = attr.st_atime_ns if fields.update_atime else st.st_atime_ns
                mtime = attr.st_mtime_ns if fields.update_mtime else st.st_mtime_ns
                os.utime(path, ns=(atime, mtime))
            return self.entry(path)

        @fuse_errors
        async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Any) -> Any:
            path = self.child(parent_inode, name)
            self.change("mkdir", path)
            os.mkdir(path, mode & ~ctx.umask)
            self.state.record(NameOp(self.state.next_seq(), "mkdir", self.under_ino(parent_inode), name.decode()))
            return self.entry(path)

        @fuse_errors
        async def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None:
            path = self.child(parent_inode, name)
            self.change("unlink", path)
            os.rmdir(path)
            self.state.record(NameOp(self.state.next_seq(), "rmdir", self.under_ino(parent_inode), name.decode()))

        @fuse_errors
        async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
            path = self.child(parent_inode, name)
            self.change("unlink", path)
            trash = self.trash_path()
            os.rename(path, trash)  # kept until the directory is fsynced: a power cut may bring it back
            self.state.record(
                NameOp(self.state.next_seq(), "unlink", self.under_ino(parent_inode), name.decode(), trash=trash)
            )

        @fuse_errors
        async def rename(
            self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes, flags: int, ctx: Any
        ) -> None:
            old, new = self.child(parent_inode_old, name_old), self.child(parent_inode_new, name_new)
            self.change("rename", old)
            if flags:
                raise pyfuse3.FUSEError(errno.EINVAL)
            replaced = None
            if os.path.lexists(new) and not os.path.isdir(new):
                replaced = self.trash_path()
                os.rename(new, replaced)
            try:
                os.rename(old, new)
            except OSError:
                if replaced:
                    os.rename(replaced, new)
                raise
            self.moved(old, new)
            self.state.record(
                NameOp(
                    self.state.next_seq(), "rename", self.under_ino(parent_inode_new), name_new.decode(),
                    old_dir_ino=self.under_ino(parent_inode_old), old_name=name_old.decode(), trash=replaced,
                )
            )  # fmt: skip

        # --- directories
        @fuse_errors
        async def opendir(self, inode: int, ctx: Any) -> int:
            self.path(inode)
            fh = self.next_fh
            self.next_fh += 1
            self.dirs[fh] = inode
            return fh

        @fuse_errors
        async def readdir(self, fh: int, start_id: int, token: Any) -> None:
            path = self.path(self.dirs[fh])
            names = sorted(os.listdir(path))
            for i, name in enumerate(names[start_id:], start_id):
                try:
                    attr = self.entry(os.path.join(path, name))
                except FileNotFoundError:
                    continue
                if not pyfuse3.readdir_reply(token, os.fsencode(name), attr, i + 1):
                    return

        @fuse_errors
        async def fsyncdir(self, fh: int, datasync: bool) -> None:
            inode = self.dirs[fh]
            path = self.path(inode)
            self.change("fsyncdir", path)
            began = self.state.next_seq()
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                await trio.to_thread.run_sync(os.fsync, fd)
            finally:
                os.close(fd)
            self.state.synced_dir(self.under_ino(inode), began)

        async def releasedir(self, fh: int) -> None:
            self.dirs.pop(fh, None)

        # --- files
        @fuse_errors
        async def open(self, inode: int, flags: int, ctx: Any) -> Any:
            path = self.path(inode)
            if flags & os.O_TRUNC:
                if (rule := self.state.fault("ftruncate", path)) and rule.errno:
                    fail(rule)
                self.state.before_change(path)
            fd = os.open(path, flags & ~os.O_CREAT | os.O_CLOEXEC)
            return self.file_info(fd, inode, path)

        @fuse_errors
        async def create(self, parent_inode: int, name: bytes, mode: int, flags: int, ctx: Any) -> Any:
            path = self.child(parent_inode, name)
            self.change("create", path)
            fd = os.open(path, flags | os.O_CREAT | os.O_CLOEXEC, mode & ~ctx.umask)
            st = os.fstat(fd)
            self.state.synced[st.st_ino] = 0
            self.state.record(NameOp(self.state.next_seq(), "create", self.under_ino(parent_inode), name.decode()))
            attr = self.entry(path)
            return self.file_info(fd, attr.st_ino, path), attr

        @fuse_errors
        async def read(self, fh: int, off: int, size: int) -> bytes:
            fd, inode = self.fds[fh]
            rule = self.state.fault("pread", self.path(inode))
            if rule and rule.errno:
                fail(rule)
            data = os.pread(fd, size, off)
            if rule and rule.flip and data:
                flipped = bytearray(data)
                flipped[len(data) // 2] ^= 0x10
                data = bytes(flipped)
            return data

        @fuse_errors
        async def write(self, fh: int, off: int, buf: bytes) -> int:
            fd, inode = self.fds[fh]
            path = self.path(inode)
            rule = self.state.fault("pwrite", path)
            if rule and rule.errno:
                fail(rule)
            self.state.before_change(path, fd)
            if rule and rule.short and len(buf) > 1:
                buf = buf[: len(buf) // 2]
            return os.pwrite(fd, buf, off)

        @fuse_errors
        async def fsync(self, fh: int, datasync: bool) -> None:
            fd, inode = self.fds[fh]
            path = self.path(inode)
            rule = self.state.fault("fsync", path)
            st = os.fstat(fd)  # the size when the fsync began: bytes written while it runs are not promised
            if rule and rule.errno:
                if rule.drop:
                    self.drop_unsynced(fd, path, rule.drop)
                    self.state.errors[st.st_ino] = self.state.errors.get(st.st_ino, 0) + 1
                self.seen[fh] = self.state.errors.get(st.st_ino, 0)
                fail(rule)
            if self.state.frozen:
                raise pyfuse3.FUSEError(errno.EIO)
            await trio.to_thread.run_sync(os.fsync, fd)
            errors = self.state.errors.get(st.st_ino, 0)
            if self.seen.get(fh, 0) != errors:
                # Pages were dropped since this descriptor last reported an error (another fsync failed, maybe
                # while this one ran): as Linux's errseq does, this fsync reports it, once per descriptor.
                self.seen[fh] = errors
                raise pyfuse3.FUSEError(errno.EIO)
            self.state.synced[st.st_ino] = max(st.st_size, self.state.synced.get(st.st_ino, 0))

        def drop_unsynced(self, fd: int, path: str, how: str) -> None:
            st = os.fstat(fd)
            keep = self.state.synced.setdefault(st.st_ino, st.st_size)
            if st.st_size <= keep:
                return
            if how == "truncate":
                os.truncate(path, keep)
            else:
                with open(path, "r+b") as f:
                    f.seek(keep)
                    f.write(bytes(st.st_size - keep))
            _log.info("dropped %d unsynced bytes of %s (%s)", st.st_size - keep, self.state.rel(path), how)

        async def flush(self, fh: int) -> None:
            return None

        async def release(self, fh: int) -> None:
            self.seen.pop(fh, None)
            entry = self.fds.pop(fh, None)
            if entry is not None:
                os.close(entry[0])

        @fuse_errors
        async def statfs(self, ctx: Any) -> Any:
            st = os.statvfs(self.state.source)
            out = pyfuse3.StatvfsData()
            for name in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail"):
                setattr(out, name, getattr(st, name))
            out.f_namemax = st.f_namemax
            return out

    return FaultOperations


# --- the control file -----------------------------------------------------------------------------------------------


def _apply_control(state: FaultState, ops: Any, control: Path, last: list[Any]) -> None:
    """Apply the control file when it changed (``last``: the text and the gen applied last)."""
    try:
        text = control.read_text()
    except FileNotFoundError:
        return
    if text == last[0]:
        return
    last[0] = text
    command = json.loads(text)
    state.rules = [Rule(**rule) for rule in command.get("rules", [])]
    if command.get("powercut") and state.powercut is None:
        state.cut(ops.path_of_dir)
    last[1] = command.get("gen", 0)


def _write_status(state: FaultState, status: Path, gen: int) -> None:
    data = {
        "gen": gen, "fired": state.fired, "counts": state.counts, "frozen": state.frozen, "powercut": state.powercut,
    }  # fmt: skip
    tmp = status.with_name(status.name + ".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, status)


async def _serve(source: Path, mountpoint: Path, control: Path) -> None:
    import pyfuse3
    import trio

    state = FaultState(source.resolve(), source.resolve().with_name(source.name + ".faultfs-trash"))
    shutil.rmtree(state.trash, ignore_errors=True)
    ops = _operations_class()(state)
    status = control.with_name(control.name + ".status")
    pyfuse3.init(ops, str(mountpoint), {"fsname=faultfs", "subtype=faultfs"})
    _log.info("faultfs: serving %s at %s", source, mountpoint)

    async def poll() -> None:
        last: list[Any] = [None, 0]
        written = None
        while True:
            try:
                _apply_control(state, ops, control, last)
            except Exception:
                _log.exception("faultfs: bad control file")
            snapshot = (last[1], len(state.fired), sum(state.counts.values()), state.powercut is not None)
            if snapshot != written:
                _write_status(state, status, last[1])
                written = snapshot
            await trio.sleep(POLL_S)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await pyfuse3.main(min_tasks=4, max_tasks=64)
            nursery.cancel_scope.cancel()
    finally:
        pyfuse3.close(unmount=True)


def main(argv: list[str] | None = None) -> int:
    import trio

    parser = argparse.ArgumentParser(description="a fault-injecting passthrough filesystem (tests only)")
    parser.add_argument("source", type=Path)
    parser.add_argument("mountpoint", type=Path)
    parser.add_argument("--control", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s faultfs: %(message)s")
    trio.run(_serve, args.source, args.mountpoint, args.control)
    return 0


if __name__ == "__main__":
    sys.exit(main())
