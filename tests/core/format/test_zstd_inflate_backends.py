"""The zstd inflate's two backends (core/format/compression.py) answer alike: python-zstandard when importable,
cramjam as the fallback and the reference.

zstandard answers only for one frame that declares its content size; everything else goes to cramjam. Each test
runs with both backends (``backend`` fixture: "cramjam" hides zstandard from the module) and, where it matters,
compares the two directly: the same bytes for a good section, the same CorruptRecord message for a bad one, the same
bound on a bomb, and the default backend really is zstandard (a test that the fast path is taken, not only that it
would be right).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from test_batch_corruption import run_memory_limited

from logfs.core.errors import CorruptRecord
from logfs.core.format import compression
from logfs.core.format.compression import DECOMPRESSED_MAX_BYTES, Compression, decompress

BACKENDS = ["zstandard", "cramjam"]
SKIPPABLE = b"\x50\x2a\x4d\x18" + (4).to_bytes(4, "little") + b"abcd"
PAYLOAD = b'{"type":"page_view","user":"user-17","url":"/products?q=red+shoes"}\n' * 300


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "cramjam":
        monkeypatch.setattr(compression, "_zstandard", None)
    yield str(request.param)


def sized(data: bytes) -> bytes:
    """A frame with its content size in the header, as kafka-python and Go clients write."""
    return zstandard.ZstdCompressor(level=3).compress(data)


def unsized(data: bytes) -> bytes:
    """A frame without a content size, as Java's ZstdOutputStream streams it."""
    return zstandard.ZstdCompressor(level=3, write_content_size=False).compress(data)


def outcome(call: Callable[[], bytes]) -> bytes | str:
    """The inflated bytes, or the CorruptRecord message (any other exception propagates and fails the test)."""
    try:
        return call()
    except CorruptRecord as exc:
        return f"CorruptRecord: {exc}"


def both(data: bytes, monkeypatch: pytest.MonkeyPatch) -> tuple[bytes | str, bytes | str]:
    fast = outcome(lambda: decompress(Compression.ZSTD, data))
    with monkeypatch.context() as m:
        m.setattr(compression, "_zstandard", None)
        reference = outcome(lambda: decompress(Compression.ZSTD, data))
    return fast, reference


GOOD = {
    "sized": (sized(PAYLOAD), PAYLOAD),
    "unsized": (unsized(PAYLOAD), PAYLOAD),
    "two-frames": (sized(PAYLOAD) + unsized(b"tail"), PAYLOAD + b"tail"),
    "frame-then-skippable": (sized(PAYLOAD) + SKIPPABLE, PAYLOAD),
    "skippable-then-frame": (SKIPPABLE + sized(PAYLOAD), PAYLOAD),
    "empty-frame": (sized(b""), b""),
}

BAD = {
    "truncated": (sized(PAYLOAD)[:-10], "incomplete frame"),
    "truncated-unsized": (unsized(PAYLOAD)[:-3], "incomplete frame"),
    "trailing-garbage": (sized(PAYLOAD) + b"xyz", "Unknown frame descriptor"),
    "garbled-magic": (b"\x00" + sized(PAYLOAD)[1:], "Unknown frame descriptor"),
    "empty": (b"", "incomplete frame"),
    "magic-only": (sized(PAYLOAD)[:4], "incomplete frame"),
}


@pytest.mark.parametrize("name", list(GOOD))
def test_good_zstd_sections_inflate_to_the_same_bytes_with_either_backend(name: str, backend: str) -> None:
    data, expected = GOOD[name]
    assert decompress(Compression.ZSTD, data) == expected


@pytest.mark.parametrize("name", list(BAD))
def test_bad_zstd_sections_are_refused_with_the_same_message_by_either_backend(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, detail = BAD[name]
    fast, reference = both(data, monkeypatch)
    assert fast == reference
    assert isinstance(fast, str)
    prefix = f"CorruptRecord: zstd records do not decompress (damaged, or inflating past {DECOMPRESSED_MAX_BYTES}"
    assert fast.startswith(prefix)
    assert detail in fast


def declared_size_lies(data: bytes, size: int) -> bytes:
    """``sized(data)`` with its one-byte Frame_Content_Size field (single-segment, FCS flag 0) set to ``size``."""
    frame = bytearray(sized(data))
    assert frame[4] & 0xE0 == 0x20 and len(data) < 256, "expects a single-segment header with a 1-byte size"
    frame[5] = size
    return bytes(frame)


@pytest.mark.parametrize("size", [0, 10, 255], ids=["declares-0", "declares-less", "declares-more"])
def test_a_frame_whose_declared_size_lies_is_decided_by_cramjam(size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    data = declared_size_lies(b"hello, zstd " * 10, size)
    fast, reference = both(data, monkeypatch)
    assert fast == reference


@settings(max_examples=60, deadline=None)
@given(
    payload=st.binary(max_size=4096), cut=st.integers(0, 64), flip=st.integers(0, 10_000), unsized_frame=st.booleans()
)
def test_backends_agree_on_random_damaged_frames(payload: bytes, cut: int, flip: int, unsized_frame: bool) -> None:
    frame = bytearray(unsized(payload) if unsized_frame else sized(payload))
    frame[flip % len(frame)] ^= 0x5A
    damaged = bytes(frame[: max(0, len(frame) - cut)])
    with pytest.MonkeyPatch.context() as mp:
        fast, reference = both(damaged, mp)
    assert fast == reference


def test_the_default_backend_is_zstandard_and_takes_sized_frames(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path is taken, not only right: with cramjam's inflate broken, a sized frame still inflates and an
    unsized one goes to cramjam."""
    assert compression._zstandard is zstandard

    def broken(data: object, out: object) -> int:
        raise AssertionError("cramjam was asked")

    monkeypatch.setattr(compression.cramjam.zstd, "decompress_into", broken)
    assert decompress(Compression.ZSTD, sized(PAYLOAD)) == PAYLOAD
    with pytest.raises(AssertionError, match="cramjam was asked"):
        decompress(Compression.ZSTD, unsized(PAYLOAD))


def test_a_sized_frame_past_the_bound_is_refused_alike_within_bounded_memory(tmp_path: Path) -> None:
    """A frame declaring 80 MiB (over the 64 MiB bound) is refused by both backends with the same message, in a
    child whose address space has room for the bound and a copy (test_batch_corruption's memory-limited child)."""
    bomb = zstandard.ZstdCompressor(level=1).compress(bytes(80 << 20))
    assert zstandard.frame_content_size(bomb) == 80 << 20
    hide = "sys.modules['logfs.core.format.compression']._zstandard = None; "
    answers = []
    for setup in ("", hide):
        proc = run_memory_limited(f"{setup}decompress({int(Compression.ZSTD)}, data)", bomb, tmp_path)
        assert proc.returncode == 0, proc.stderr[-2000:]
        answers.append(proc.stdout)
    assert answers[0] == answers[1]
    assert answers[0].startswith(b"CorruptRecord zstd records do not decompress"), answers[0]


def test_each_thread_inflates_with_its_own_decompressor() -> None:
    import threading

    seen: list[object] = []

    def work() -> None:
        assert decompress(Compression.ZSTD, sized(PAYLOAD)) == PAYLOAD
        seen.append(compression._buffers.zstd)

    threads = [threading.Thread(target=work) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    work()
    assert len({id(d) for d in seen}) == 3
