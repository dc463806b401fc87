"""``fusermount3``, the setuid helper that detaches a FUSE mount: one home for how logfs calls it.

Kept apart from ``mount/server.py`` so that ``logfs umount`` imports nothing but this (the server pulls in pyfuse3,
trio and the whole store: 0.6 s of imports for a command that runs one subprocess).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

FUSERMOUNT = "fusermount3"


def unmount(mountpoint: Path, *, lazy: bool = False) -> subprocess.CompletedProcess[str]:
    """``fusermount3 -u [-z] MOUNTPOINT`` (the daemon then sees the unmount and shuts down cleanly)."""
    args = [FUSERMOUNT, "-u", *(["-z"] if lazy else []), str(mountpoint)]
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
