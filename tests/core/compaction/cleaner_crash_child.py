"""The child of the kill -9 campaign (test_cleaner_crash.py): open the partition in argv[1] (a clean shutdown),
print "ready", run one cleaning round from offset 0 at the time in argv[2], print "done".

Every rename and unlink is slowed by a millisecond so that a kill at a random moment lands inside the swap often
enough (the swap is a few dozen file operations; without the delay nearly every kill would hit the recopy)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from compaction_log import clean, one_group_config, open_log

_real = {name: getattr(os, name) for name in ("rename", "replace", "unlink")}


def _slowed(name: str):  # type: ignore[no-untyped-def]
    def call(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.001)
        return _real[name](*args, **kwargs)

    return call


def main() -> None:
    log = open_log(Path(sys.argv[1]), one_group_config())
    for name in _real:
        setattr(os, name, _slowed(name))
    print("ready", flush=True)
    clean(log, 0, now=int(sys.argv[2]))
    print("done", flush=True)


if __name__ == "__main__":
    main()
