"""Issue 16, power loss: an acknowledgement (``flush_records``: fsync(2), O_SYNC, acks=all) must never return before
the name of every segment its records live in is durable — whichever thread happens to fsync the directory.

The race these tests pin down (found hunting the one loss of the power-cut campaign): after a roll, a first flush
(the tick's ``flush_rolled``, or another writer's ``flush_records``) took the "directory unsynced" mark and went on
to fsync its segments, the directory last; a second ``flush_records`` meanwhile saw no mark, fsynced the new active
segment and returned — its acknowledgement covered records in a ``.log`` whose name was not yet durable, and a power
cut before the first thread's directory fsync dropped them. Each test holds the first thread inside its segment fsync
(a hook on ``LogSegment``), runs the second to its return, and checks that a directory fsync of the partition had
completed by then, after the roll.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from logfs.core.format.encode import encode_values
from logfs.core.log import local as local_module
from logfs.core.log.log import Log
from logfs.core.log.segment import LogSegment
from logfs.core.store import Store

TS = 1_700_000_000_000
HOLD_S = 10.0


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "store")
    s.create_topic("t", 1)
    yield s
    s.close()


def _append(log: Log, value: bytes) -> None:
    log.append_as_leader(encode_values([value], TS), 0)


def _dir_syncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every completed directory fsync of the partition log module."""
    done: list[str] = []
    real = local_module.fsync_dir

    def recording(directory: Path) -> None:
        real(directory)
        done.append(os.path.basename(directory))

    monkeypatch.setattr(local_module, "fsync_dir", recording)
    return done


def _hold_first_call(monkeypatch: pytest.MonkeyPatch, method: str) -> tuple[threading.Event, threading.Event]:
    """Make the first call of ``LogSegment.<method>`` wait (after its fsync) until released; (entered, release)."""
    entered, release = threading.Event(), threading.Event()
    real: Callable[[LogSegment], None] = getattr(LogSegment, method)
    first = [True]

    def held(segment: LogSegment) -> None:
        real(segment)
        if first[0]:
            first[0] = False
            entered.set()
            assert release.wait(HOLD_S), "the held flush was never released"

    monkeypatch.setattr(LogSegment, method, held)
    return entered, release


@pytest.mark.parametrize(
    ("first_flush", "held_method"),
    [("flush_rolled", "flush"), ("flush_records", "flush_records"), ("flush", "flush")],
)
def test_an_ack_never_returns_before_the_new_segment_name_is_durable(
    store: Store, monkeypatch: pytest.MonkeyPatch, first_flush: str, held_method: str
) -> None:
    log = store.log("t", 0)
    _append(log, b"a")
    log.flush_records()
    log.roll()
    _append(log, b"b")  # in the new segment, whose name no directory fsync has covered yet
    syncs = _dir_syncs(monkeypatch)
    entered, release = _hold_first_call(monkeypatch, held_method)
    errors: list[BaseException] = []

    def first() -> None:
        try:
            getattr(log, first_flush)()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    thread = threading.Thread(target=first, name=f"first {first_flush}")
    thread.start()
    try:
        assert entered.wait(HOLD_S), f"{first_flush} never reached its segment fsync"
        assert syncs == []  # the first thread holds the mark and has not synced the directory yet
        _append(log, b"c")
        log.flush_records()  # the acknowledgement of b and c
        assert syncs == ["t-0"], "flush_records returned before the new segment's name was durable"
        assert log.durable_offset == 3
    finally:
        release.set()
        thread.join(HOLD_S)
    assert not thread.is_alive() and not errors, errors
    log.flush_records()
    assert log.durable_offset == 3


def test_a_directory_fsync_that_began_before_a_roll_does_not_cover_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flush whose directory fsync was decided before a roll does not count for the segment that roll made."""
    log = store.log("t", 0)
    _append(log, b"a")
    log.roll()
    _append(log, b"b")
    syncs = _dir_syncs(monkeypatch)
    entered, release = _hold_first_call(monkeypatch, "flush")
    thread = threading.Thread(target=log.flush_rolled, name="first flush_rolled")
    thread.start()
    try:
        assert entered.wait(HOLD_S)
        log.roll()  # a second new segment while the first flush is on its way to its directory fsync
        _append(log, b"c")
        release.set()
        thread.join(HOLD_S)
        assert syncs == ["t-0"]
        log.flush_records()
        assert syncs == ["t-0", "t-0"], "the second roll's segment was acknowledged under an older directory fsync"
    finally:
        release.set()
        thread.join(HOLD_S)
