"""A store holds no symbolic link: not in its directory, not in a partition directory, and no partition directory is
one.

Why: the store writes, truncates, renames and deletes its files by name (a segment's ``.log`` is appended to, its
indexes are truncated at a roll, a checkpoint is replaced through ``<name>.tmp``, a deleted topic's directory is
removed whole). A link in place of any of them would have the store do that to whatever the link points at, which
may lie outside the store: a ``.log`` linked to a user's file would take records at its end, a partition directory
linked elsewhere would have its segments made and deleted there. logfs never makes a link, so a link is either
damage or a hand that put it there; either way the store is not opened until it is gone, and
:class:`~logfs.core.errors.LinkInStore` names the link.

Cost: the listings a load makes anyway tell links apart by their directory entries' types (``DirEntry.is_symlink``
reads ``d_type``; a stat only on file systems that do not fill it), so a clean open of 10,000 partitions pays no
system call for this; a partition made while the store is open costs one ``lstat`` of its new directory's name.
``logfs check`` reports every link instead of stopping at the first (:func:`find_links`). The lock file is opened
with ``O_NOFOLLOW`` (core/storedir.py), since it is opened before the first listing.

Any thread; blocking (the disk).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from logfs.core.errors import LinkInStore
from logfs.core.topicnames import parse_partition_dir


def refuse_links(entries: Iterable[os.DirEntry[str]]) -> None:
    """LinkInStore for the first entry of a listing (the store's, or a partition directory's) that is a link."""
    for entry in entries:
        if entry.is_symlink():
            raise LinkInStore(entry.path)


def refuse_link(path: Path) -> None:
    """LinkInStore when ``path`` is a link; nothing when it is anything else or does not exist (a new partition
    directory, before it is made)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise LinkInStore(str(path))


def find_links(root: Path) -> list[Path]:
    """Every link of the store at ``root``: in its directory, and in each partition directory that is not one itself
    (sorted). ``logfs check`` reports them all; an open stops at the first."""
    links: list[Path] = []
    with os.scandir(root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        if entry.is_symlink():
            links.append(Path(entry.path))
        elif entry.is_dir(follow_symlinks=False) and parse_partition_dir(entry.name) is not None:
            with os.scandir(entry.path) as inner:
                links.extend(sorted(Path(e.path) for e in inner if e.is_symlink()))
    return links
