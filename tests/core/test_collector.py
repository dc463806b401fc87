"""core/collector.py: the cyclic collector is paused while a store loads and left as it was found."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logfs.core.collector import collector_paused, freeze_loaded
from logfs.core.store import NewTopic, Store
from logfs.core.storeconfig import StoreConfig


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_a_pause_disables_the_collector_and_restores_it_after_an_error() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_the_caller_disabled_stays_disabled() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_overlapping_pauses_in_threads_restore_the_collector_only_when_the_last_ends() -> None:
    entered, release_second = threading.Event(), threading.Event()
    seen: list[bool] = []

    def second() -> None:
        with collector_paused():
            entered.set()
            release_second.wait(10)
            seen.append(gc.isenabled())

    with collector_paused():
        t = threading.Thread(target=second)
        t.start()
        assert entered.wait(10)
    assert not gc.isenabled()  # the first pause ended, the second still holds it
    release_second.set()
    t.join(10)
    assert seen == [False] and gc.isenabled()


def test_a_store_open_pauses_the_collector_during_its_load_only(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s", StoreConfig())
    store.create_topics([NewTopic("t", 3)])
    store.close()
    states: list[bool] = []
    original = Store._load_all

    def spy(self: Store, *args: Any) -> None:
        states.append(gc.isenabled())
        original(self, *args)

    Store._load_all = spy  # type: ignore[method-assign]
    try:
        reopened = Store.open(tmp_path / "s", StoreConfig())
    finally:
        Store._load_all = original  # type: ignore[method-assign]
    try:
        assert states == [False] and gc.isenabled()
        assert reopened.partitions("t") == [0, 1, 2]
    finally:
        reopened.close()


def test_freezing_the_loaded_store_puts_its_objects_out_of_the_collectors_sight(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s", StoreConfig())
    try:
        before = gc.get_freeze_count()
        freeze_loaded()
        assert gc.get_freeze_count() > before + 100  # the store's segments, indexes, files...
    finally:
        gc.unfreeze()
        store.close()
