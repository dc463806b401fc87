"""A reply the kernel refuses with ENOENT (its request is gone: the caller was killed, or a lazily unmounted mount's
connection was torn down under its last release) is logged by pyfuse3 at ERROR; the mount lowers it to DEBUG
(mount/server.py) and leaves every other failed reply loud. A CI run failed on such a line after a lazy unmount."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from logfs.mount.server import _GONE_REQUEST_REPLIES


@pytest.fixture
def pyfuse3_log(caplog: pytest.LogCaptureFixture) -> Iterator[logging.Logger]:
    logger = logging.getLogger("pyfuse3")
    logger.addFilter(_GONE_REQUEST_REPLIES)
    caplog.set_level(logging.INFO)
    yield logger
    logger.removeFilter(_GONE_REQUEST_REPLIES)


def test_a_reply_to_a_gone_request_is_not_an_error(
    pyfuse3_log: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    pyfuse3_log.error("fuse_release(): fuse_reply_* failed with %s", "No such file or directory")
    assert [r for r in caplog.records if r.name == "pyfuse3"] == []


def test_other_failed_replies_stay_errors(pyfuse3_log: logging.Logger, caplog: pytest.LogCaptureFixture) -> None:
    pyfuse3_log.error("fuse_read(): fuse_reply_* failed with %s", "Bad file descriptor")
    pyfuse3_log.error("something else: No such file or directory")
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "pyfuse3"] == [
        ("ERROR", "fuse_read(): fuse_reply_* failed with Bad file descriptor"),
        ("ERROR", "something else: No such file or directory"),
    ]
