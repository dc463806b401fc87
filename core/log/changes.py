"""What a log reports about itself to its store, so that the store's periodic work visits only the logs that need it.

A store of 10,000 partitions cannot afford to walk every partition once a second (the mount ticks it that often):
instead each log tells the store when it *becomes* interesting (docs/storage.md, "Periodic work"):

* ``FLUSH``: records were appended since the last flush (reported when the count of unflushed records leaves 0),
  or a roll left a segment to flush; the store's tick flushes it when ``flush.ms`` says so;
* ``DELETE``: a segment was renamed ``.deleted``; the tick unlinks it once ``file.delete.delay.ms`` has passed;
* ``CHECKPOINT``: the high watermark, the recovery point or the log start offset moved; the store rewrites its
  checkpoint files only when one did.

A sink is called under the log's lock from whichever thread changed it: it must be cheap and must not call back into
the log.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class Change(enum.Flag):
    FLUSH = enum.auto()
    DELETE = enum.auto()
    CHECKPOINT = enum.auto()


ChangeSink = Callable[[Change], None]


def ignore_changes(_change: Change) -> None:
    """The sink of a log that belongs to no store (tools, tests): nothing listens."""
