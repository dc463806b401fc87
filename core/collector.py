"""Pausing Python's cyclic garbage collector while a store loads.

Opening a store of 10,000 partitions makes about 600,000 objects (segments, indexes, files, epoch caches), every one
of them long-lived and none of them garbage. With the collector on, the allocations alone trigger seven full
collections, each walking every object made so far: 1–2 s of a 4–5 s open on this project's 2-core VM
(docs/benchmarks.md, "Scale"). Paused, nothing is lost (reference counting still frees whatever is dropped); the
first collection after the load walks the new objects once.

The collector is process-wide, so pauses are counted: concurrent loads (tests open several stores at once) leave it
as the first of them found it only when the last one ends.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block (any thread); the collector's earlier state restored after it."""
    global _pauses, _was_enabled
    with _lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


def freeze_loaded() -> None:
    """Move every object alive now out of the collector's sight (``gc.freeze``), for a process that has just opened
    its store and keeps it until it exits (a mount, a follower, a cluster node). Its later full collections then walk
    only what came after (the mount's inodes, say), not the store's objects again. Measured with ``gc.callbacks`` in
    a mount of 10,000 partitions over one ``ls -R``: 2.4 s in collections before (four full ones, 2.0 s), 0.9–1.0 s
    after. A frozen object is still freed when its last reference goes; only a reference cycle among objects alive
    at the freeze would never be collected."""
    gc.freeze()
