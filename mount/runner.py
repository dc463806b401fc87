"""The type of the mount's two worker-thread runners (``Operations._read_thread`` and ``_write_thread``).

The parts of the mount that run on the trio thread (reads, writes, follow readers, replication, transactions) are
handed these runners rather than calling ``trio.to_thread`` themselves, so that every blocking core call goes through
one of the two CapacityLimiters ``mount/operations.py`` owns (readers never starve writers of threads).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

# ``await run(fn, *args)``: ``fn(*args)`` on a worker thread, its result (or its exception) on the trio thread.
Runner = Callable[..., Awaitable[Any]]
