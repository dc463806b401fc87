"""The mount's errno table (``mount/errno.py``) and the decorator that applies it, without a mount: every error
type answers one errno, along its class hierarchy; only the table builds FUSE errors; the docs hold the table."""

from __future__ import annotations

import errno
import logging
import re
from pathlib import Path

import pyfuse3
import pytest
import trio

from logfs.core import errors as core
from logfs.core.format.framing import LineTooLong
from logfs.mount import errno as mount_errno
from logfs.mount import errors

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (core.CorruptRecord("crc"), errno.EBADMSG),
        (core.ControlRecordNotAllowed("control"), errno.EBADMSG),
        (core.RecordTooLarge(10, 5), errno.EFBIG),
        (core.TopicNameTooLong("long"), errno.ENAMETOOLONG),
        (core.InvalidTopic("bad"), errno.EINVAL),
        (core.GroupIdTooLong("long"), errno.ENAMETOOLONG),
        (core.InvalidGroupId("bad"), errno.EINVAL),
        (core.TransactionalIdTooLong("long"), errno.ENAMETOOLONG),
        (core.InvalidTransactionalId("bad"), errno.EINVAL),
        (core.LinkInStore("/s/t-0"), errno.EIO),
        (core.OffsetOutOfRange(5, 0, 1), errno.ENOENT),
        (core.StoreLocked("/s", None), errno.EIO),
        (core.DiskFull("full"), errno.ENOSPC),
        (core.CorruptIndex("/i", "bad"), errno.EIO),
        (core.TopicNotEmpty("t"), errno.ENOTEMPTY),
        (core.ProducerFenced("old"), errno.ESTALE),
        (core.InvalidJsonRecord("x"), errno.EINVAL),
        (LineTooLong(10, 5), errno.EFBIG),
        (errors.NoEntry("x"), errno.ENOENT),
        (errors.NotPermitted("unlink"), errno.EPERM),
        (errors.ReadOnlyMount("ro"), errno.EROFS),
        (errors.BadFileHandle("fh"), errno.EBADF),
        (errors.NotADirectory("f"), errno.ENOTDIR),
        (errors.IsADirectory("d"), errno.EISDIR),
        (errors.WrongAccessMode("w"), errno.EACCES),
        (errors.TooManyReaders("n"), errno.EMFILE),
        (errors.Interrupted("sig"), errno.EINTR),
        (errors.InvalidName("n"), errno.EINVAL),
        (errors.InvalidCommand("c"), errno.EINVAL),
        (errors.UnfinishedBatch("b"), errno.EBADMSG),
        (errors.BrokenFraming("b"), errno.EBADMSG),
        (errors.BrokenByTooLarge("b"), errno.EFBIG),
        (core.UnknownReplica(4, (1, 2), 1), errno.EPERM),
        (OSError(errno.ENOSPC, "full"), errno.ENOSPC),
        (OSError(errno.EROFS, "ro"), errno.EIO),
        (ValueError("a bug"), errno.EIO),
    ],
)
def test_errno_lookup_walks_the_class_hierarchy(exc: Exception, code: int) -> None:
    assert mount_errno.errno_for(exc) == code


def test_errno_table_has_each_type_once_and_every_core_error_maps() -> None:
    types = [t for t, _, _ in mount_errno.ERRNO_TABLE]
    assert len(types) == len(set(types))
    for name in dir(core):
        klass = getattr(core, name)
        if isinstance(klass, type) and issubclass(klass, core.LogfsError):
            assert mount_errno.lookup(klass.__new__(klass)) is not None, name


def test_every_refusal_of_the_mount_has_a_row_of_its_own() -> None:
    """No mount refusal falls back to a parent's errno by accident: each is named in the table."""
    types = {t for t, _, _ in mount_errno.ERRNO_TABLE}
    refusals = [k for k in vars(errors).values() if isinstance(k, type) and issubclass(k, errors.MountRefusal)]
    assert len(refusals) > 10
    assert [k.__name__ for k in refusals if k is not errors.MountRefusal and k not in types] == []


def test_only_the_errno_table_builds_fuse_errors() -> None:
    """The mount raises typed errors; ``mount/errno.py`` alone turns them into ``pyfuse3.FUSEError``."""
    for path in sorted((ROOT / "mount").glob("*.py")):
        if path.name != "errno.py":
            assert "FUSEError" not in path.read_text(), path


def test_docs_hold_the_current_errno_table() -> None:
    text = (ROOT / "docs/mount.md").read_text()
    m = re.search(r"<!-- ERRNO_TABLE -->\n(.*?)<!-- /ERRNO_TABLE -->", text, re.S)
    assert m is not None
    assert m[1] == mount_errno.render_table()


class _FakeOps:
    def __init__(self) -> None:
        self.counted: list[int] = []

    def count_error(self, code: int) -> None:
        self.counted.append(code)

    @mount_errno.handler
    async def lookup(self, what: Exception | None) -> str:
        if what is not None:
            raise what
        return "ok"

    @mount_errno.handler
    async def forget(self, what: Exception) -> None:
        raise what


def _run_lookup(ops: _FakeOps, what: Exception | None) -> int | str:
    async def go() -> int | str:
        try:
            return await ops.lookup(what)
        except pyfuse3.FUSEError as exc:
            return -exc.errno

    return trio.run(go)


def test_handler_lets_only_fuse_errors_out(caplog: pytest.LogCaptureFixture) -> None:
    ops = _FakeOps()
    caplog.set_level(logging.INFO, logger="logfs.mount.errno")
    assert _run_lookup(ops, None) == "ok"
    assert _run_lookup(ops, pyfuse3.FUSEError(errno.ENOENT)) == -errno.ENOENT
    assert _run_lookup(ops, core.CorruptRecord("crc")) == -errno.EBADMSG
    assert _run_lookup(ops, KeyError("bug")) == -errno.EIO
    assert ops.counted == [errno.ENOENT, errno.EBADMSG, errno.EIO]
    bug = [r for r in caplog.records if "KeyError" in r.getMessage()]
    assert bug and bug[0].levelno == logging.ERROR and bug[0].exc_info is not None
    refusal = [r for r in caplog.records if "crc" in r.getMessage()]
    assert refusal and refusal[0].levelno == logging.INFO and refusal[0].exc_info is None
    # forget has no reply: nothing may leave it, not even FUSEError
    assert trio.run(ops.forget, pyfuse3.FUSEError(errno.EIO)) is None
    assert trio.run(ops.forget, RuntimeError("bug")) is None
