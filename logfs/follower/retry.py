"""How the follower retries a leader's mount after a failed call: it waits (:class:`Backoff`, from
``BACKOFF_INITIAL_S`` doubling up to ``BACKOFF_MAX_S``, Kafka's ``replica.fetch.backoff.ms``) and names the failure
in its log once (:func:`describe`). Each retrying loop owns its own backoff, reset by its own success: the session
(``logfs/follower/sessionfetch.py``), discovery (``logfs/follower/discoveryloop.py``) and each partition's fetch
task (``logfs/follower/daemon.py``).

Threads: the trio thread.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass

import trio

BACKOFF_INITIAL_S = 0.05  # first retry after a failed fetch; doubles up to
BACKOFF_MAX_S = 1.0  # (Kafka's replica.fetch.backoff.ms is 1 s)


@dataclass
class Backoff:
    delay_s: float = BACKOFF_INITIAL_S

    async def wait(self) -> None:
        await trio.sleep(self.delay_s)
        self.delay_s = min(self.delay_s * 2, BACKOFF_MAX_S)

    def reset(self) -> None:
        self.delay_s = BACKOFF_INITIAL_S


def describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{name}: {exc.strerror or exc}" if name else str(exc)
