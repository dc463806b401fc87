"""An over-long line through a real mount (issue 23, point 2): EFBIG, nothing of it stored, the handle refuses every
later write, however a program writes it.

The kernel cuts one write(2) into FUSE requests (1 MiB at most; a ``direct_io`` file also where the user buffer
spans more than 256 pages). When a later request of the write is refused, the kernel reports the earlier ones as
written (a short count) and the program re-sends the rest: Python's BufferedWriter does, as does any ``os.write``
loop. The rest of the refused line must not then become a record of its own — the bug this file guards against
(``mount/writes.py``, ``Writer.write``: the handle is poisoned on the refusal).

The campaign: every line size × write method × file, each checked the same way (:func:`_check_refused`): the
program saw EFBIG, the LEO did not move, the handle (where the test holds it) refuses a later good line, and a good
line on a new handle is stored. The limit tests pin the byte arithmetic (``core/format/lines.max_text_line_bytes``):
a line whose batch is exactly ``max.message.bytes`` is stored, one byte more is refused.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Mount, errno_of, make_topic, sh, state, write_all

MIB = 1 << 20
DEFAULT_MAX_MESSAGE_BYTES = 1048588  # Kafka's default max.message.bytes (the topics here keep it)
SIZES = [MIB, int(1.1 * MIB), int(1.5 * MIB), 2 * MIB, 3 * MIB]  # the over-long line, its newline not counted


def _zigzag_varint_size(n: int) -> int:
    """Bytes of Kafka's zigzag varint of ``n`` (written out here, not taken from the code under test)."""
    v = (n << 1) ^ (n >> 63)
    size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size


def one_record_batch_bytes(value_bytes: int) -> int:
    """The size of a v2 batch of one record with a null key, no headers and deltas 0: the 61-byte batch header,
    then the record's length varint and its body (attributes, timestampDelta, offsetDelta, key length -1, the value's
    length varint, the value, header count 0)."""
    body = 1 + 1 + 1 + 1 + _zigzag_varint_size(value_bytes) + value_bytes + 1
    return 61 + _zigzag_varint_size(body) + body


def _line(file: str, size: int) -> bytes:
    """A line of ``size`` bytes (its newline not counted) for ``file``: x's, or a JSON object whose value is x's."""
    if file == "append":
        return b"x" * size + b"\n"
    return b'{"value":"' + b"x" * (size - 12) + b'"}\n'


# --- the write methods: each returns the errno the program saw (None: it reported success) and the errno a good line
# written after it on the same handle got (None: taken, or the handle is the shell's and out of reach) --------------

Outcome = tuple[int | None, int | None]


def _python_buffered_text(path: Path, line: bytes, after: bytes) -> Outcome:
    """``open(p, "a").write(...)``: TextIOWrapper over a BufferedWriter, which re-sends the rest of a short write;
    then a good line on the same file object, which must be refused too."""
    seen = None
    f = open(path, "a")  # noqa: SIM115 - closed below, after the refusals are looked at one by one
    try:
        try:
            f.write(line.decode())
            f.flush()
        except OSError as exc:
            seen = exc.errno
        refused_after = errno_of(_write_and_flush, f, after.decode())
    finally:
        try:
            f.close()
        except OSError as exc:  # the buffer still holds what was refused: close flushes it, refused again
            assert exc.errno == errno.EFBIG
    return seen, refused_after


def _write_and_flush(f, text: str) -> None:  # type: ignore[no-untyped-def]
    f.write(text)
    f.flush()


def _python_buffered_bytes(path: Path, line: bytes, after: bytes) -> Outcome:
    """``open(p, "ab").write(...)`` with a default buffer."""
    seen = None
    f = open(path, "ab")  # noqa: SIM115 - as above
    try:
        try:
            f.write(line)
            f.flush()
        except OSError as exc:
            seen = exc.errno
        refused_after = errno_of(_write_and_flush, f, after)
    finally:
        try:
            f.close()
        except OSError as exc:
            assert exc.errno == errno.EFBIG
    return seen, refused_after


def _os_write_retrying(path: Path, line: bytes, after: bytes) -> Outcome:
    """One ``os.write`` of the whole line from an unaligned buffer, re-sending the rest after each short write (as
    tests/conftest.py's write_all does), stopping at the first error; then a good line on the same descriptor."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        view = memoryview(b"." + line)[1:]  # an offset into the buffer: the kernel also cuts at 256 pages
        try:
            while view:
                view = view[os.write(fd, view) :]
            seen = None
        except OSError as exc:
            seen = exc.errno
        refused_after = errno_of(os.write, fd, after)
    finally:
        os.close(fd)
    return seen, refused_after


def _shell(command: str) -> Callable[[Path, bytes, bytes], Outcome]:
    """A shell command line writing the file ``SRC`` (holding the line) to ``DST``: EFBIG when it fails saying
    "File too large" (the handle is the shell's: only the exit status and message tell)."""

    def run(path: Path, line: bytes, after: bytes) -> Outcome:
        src = path.parent.parent.parent.with_name("oversized-line.src")
        src.write_bytes(line)
        try:
            done = sh(command.replace("SRC", str(src)).replace("DST", str(path)), path.parent, timeout=60)
        finally:
            src.unlink()
        if done.returncode == 0:
            return None, None
        assert "File too large" in done.stderr, done.stderr
        return errno.EFBIG, None

    return run


METHODS: dict[str, Callable[[Path, bytes, bytes], Outcome]] = {
    "python-text": _python_buffered_text,
    "python-bytes": _python_buffered_bytes,
    "os.write-retrying": _os_write_retrying,
    "dd-bs64k": _shell("dd if=SRC of=DST bs=64k status=none"),
    "dd-bs1M": _shell("dd if=SRC of=DST bs=1M status=none"),
    "printf": _shell("""printf '%s\\n' "$(cat SRC)" >> DST"""),
    "cat": _shell("cat SRC >> DST"),
}


HANDLE_METHODS = frozenset({"python-text", "python-bytes", "os.write-retrying"})  # the test holds the handle


@pytest.fixture
def mnt(shared_mount: Mount) -> Path:
    shared_mount.allow_refusals(r"/over-[^ ]*/", "write")
    shared_mount.allow_refusals(r"/over-[^ ]*/", "flush")
    return shared_mount.path


def _good(file: str, text: str) -> bytes:
    return (text if file == "append" else json.dumps({"value": text})).encode() + b"\n"


def _check_refused(mnt: Path, topic: str, file: str, method: str, line: bytes) -> None:
    """Write ``line`` with ``method``: EFBIG seen, the LEO unmoved, a good line on the same handle refused (where the
    test holds it), then a good line on a new handle stored."""
    path = mnt / topic / "0" / file
    before = state(mnt, topic)["log_end_offset"]
    what = f"{len(line) - 1}-byte line to {file} by {method}"
    seen, after = METHODS[method](path, line, _good(file, "after"))
    assert seen == errno.EFBIG, f"{what}: the program saw {seen and errno.errorcode[seen]}"
    assert state(mnt, topic)["log_end_offset"] == before, f"{what}: something was stored"
    assert after == (errno.EFBIG if method in HANDLE_METHODS else None), f"{what}: the handle took a line after EFBIG"
    write_all(path, _good(file, f"ok {before}"))
    assert state(mnt, topic)["log_end_offset"] == before + 1, what
    assert (mnt / topic / "0/at" / str(before)).read_bytes() == f"ok {before}\n".encode(), what


@pytest.mark.parametrize("file", ["append", "append.jsonl"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_an_over_long_line_is_refused_whole_however_it_is_written(mnt: Path, file: str, method: str) -> None:
    topic = f"over-{method.replace('.', '-')}-{file.replace('.', '-')}"
    make_topic(mnt, topic)
    for size in SIZES:
        _check_refused(mnt, topic, file, method, _line(file, size))
    # nothing but the good lines, each stored whole
    assert (mnt / topic / "0/at/earliest").read_bytes() == b"".join(b"ok %d\n" % i for i in range(len(SIZES)))


@pytest.mark.parametrize("file", ["append", "append.jsonl"])
def test_a_batch_at_max_message_bytes_is_stored_and_one_byte_more_is_refused(mnt: Path, file: str) -> None:
    topic = f"over-limit-{file.replace('.', '-')}"
    make_topic(mnt, topic)
    longest = DEFAULT_MAX_MESSAGE_BYTES - 72  # 61 header + 11 framing at this size (one_record_batch_bytes)
    assert one_record_batch_bytes(longest) == DEFAULT_MAX_MESSAGE_BYTES
    assert one_record_batch_bytes(longest + 1) == DEFAULT_MAX_MESSAGE_BYTES + 1
    extra = 0 if file == "append" else 12  # the JSON around the value: {"value":"…"}
    for value_bytes in (longest - 1, longest):
        before = state(mnt, topic)["log_end_offset"]
        write_all(mnt / topic / "0" / file, _line(file, value_bytes + extra))  # os.write retrying short writes
        assert state(mnt, topic)["log_end_offset"] == before + 1
        stored = (mnt / topic / "0/at" / f"{before}.kafka").read_bytes()
        assert len(stored) == one_record_batch_bytes(value_bytes)  # limit - 1, then the limit exactly
        assert (mnt / topic / "0/at" / str(before)).read_bytes() == b"x" * value_bytes + b"\n"
    for method in ("os.write-retrying", "python-bytes", "dd-bs64k"):
        _check_refused(mnt, topic, file, method, _line(file, longest + 1 + extra))


@pytest.mark.parametrize("file", ["append", "append.jsonl"])
def test_the_topic_level_files_refuse_an_over_long_line_the_same_way(mnt: Path, file: str) -> None:
    topic = f"over-topic-{file.replace('.', '-')}"
    make_topic(mnt, topic, partitions=2)
    for method in ("python-text", "os.write-retrying", "dd-bs1M"):
        for size in (int(1.1 * MIB), 3 * MIB):
            seen, after = METHODS[method](mnt / topic / file, _line(file, size), _good(file, "after"))
            assert seen == errno.EFBIG, (method, size)
            assert after == (errno.EFBIG if method in HANDLE_METHODS else None), (method, size)
            assert [state(mnt, topic, p)["log_end_offset"] for p in (0, 1)] == [0, 0], (method, size)
    write_all(mnt / topic / file, _good(file, "fresh"))
    assert sum(state(mnt, topic, p)["log_end_offset"] for p in (0, 1)) == 1


def test_lines_completed_in_earlier_requests_of_the_write_stay(mnt: Path) -> None:
    """One write(2) of a short line, then an over-long one: the kernel's first request (up to 1 MiB) holds the short
    line whole, which is stored with it; the request completing the long line is refused, and the short count the
    kernel reports covers the short line. Whole or nothing is per request (docs/mount.md)."""
    topic = "over-prefix"
    # A limit above any one request (at most 1 MiB): the kernel's first request is 1 MiB exactly from a page-aligned
    # buffer and a little less from another, so with the default limit (just under 1 MiB) whether the first request
    # already overflows the line depended on where the buffer happened to lie.
    make_topic(mnt, topic, **{"max.message.bytes": int(1.25 * MIB)})
    fd = os.open(mnt / topic / "0/append", os.O_WRONLY)
    try:
        data = b"short\n" + b"x" * int(2.5 * MIB) + b"\n"
        written = os.write(fd, data)
        assert 6 < written < len(data)  # the first request only
        assert errno_of(os.write, fd, data[written:]) == errno.EFBIG
        assert errno_of(os.write, fd, b"later\n") == errno.EFBIG
    finally:
        os.close(fd)
    assert (mnt / topic / "0/at/earliest").read_bytes() == b"short\n"


def test_a_line_too_large_inside_one_request_poisons_the_handle(mnt: Path) -> None:
    """With a small max.message.bytes the over-long line fits in one request: EFBIG, nothing of the request stored
    (the line before it neither), and the same descriptor refuses a good line after it."""
    for file in ("append", "append.jsonl"):
        topic = f"over-small-{file.replace('.', '-')}"
        make_topic(mnt, topic, **{"max.message.bytes": 1000})
        fd = os.open(mnt / topic / "0" / file, os.O_WRONLY)
        try:
            assert errno_of(os.write, fd, _good(file, "before") + _line(file, 2000)) == errno.EFBIG
            assert errno_of(os.write, fd, _good(file, "after")) == errno.EFBIG
        finally:
            os.close(fd)
        assert state(mnt, topic)["log_end_offset"] == 0
        write_all(mnt / topic / "0" / file, _good(file, "fresh"))
        assert (mnt / topic / "0/at/earliest").read_bytes() == b"fresh\n"
    # size decides before parsing: JSON text over twice the limit is EFBIG even when it is not JSON at all
    not_json = b'{"value":' + b"x" * 2500 + b"\n"
    assert errno_of(write_all, mnt / "over-small-append-jsonl/0/append.jsonl", _good("jsonl", "a") + not_json) == (
        errno.EFBIG
    )
    assert errno_of(write_all, mnt / "over-small-append-jsonl/0/append.jsonl", not_json[:1500] + b"\n") == (
        errno.EINVAL
    )  # within the text limit: read, and refused as not JSON
    assert state(mnt, "over-small-append-jsonl")["log_end_offset"] == 1
