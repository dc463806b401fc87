"""Putting a cleaned segment in place of the segments it replaces, crash-safe and whole (Kafka's
``LocalLog.replaceSegments``, with one addition; docs/compaction.md, "Crash safety: the swap, better than Kafka's").

The cleaner writes a merge's new segment as ``NNN.log.cleaned`` (and ``.index``, ``.timeindex``, ``.txnindex``
``.cleaned``: :func:`create_cleaned_segment`) and fsyncs it. Then, under the log's lock (:func:`replace_segments`):

1. the **intent** file ``cleaner-swap.intent`` is written durably (``replace_file``: tmp, fsync, rename, fsync of
   the directory). It names the new segment's base offset, which of its four files exist, and the base offsets
   of every segment it replaces;
2. the new files are renamed ``.cleaned`` → ``.swap`` and the directory fsynced;
3. the log's segment snapshot switches to the new segment, and the old segments' files are renamed ``.deleted``
   (unlinked after ``file.delete.delay.ms``; a reader that pinned one keeps reading it, as with retention);
4. the new files are renamed ``.swap`` → their final names and the directory fsynced;
5. the intent file is unlinked and the directory fsynced.

Recovery (:func:`complete_interrupted_swap`, which the loader runs before Kafka's own passes): with no intent file
nothing is to be done here. With one, the swap either had not finished step 2 — some new file still ends in
``.cleaned`` — and is **undone** (every ``.cleaned`` and ``.swap`` file of the new base is deleted; the old segments
were not touched before step 2 ended), or had, and is **completed**: every file of a replaced segment is deleted
(plain names; ``.deleted`` ones go with Kafka's first pass), each new ``.swap`` file takes its final name, and a
final-named file of the new base that the new segment does not have (an old ``.txnindex``) is deleted. Either way
the log reads exactly as before the swap or exactly as after it.

Kafka has no intent: its loader deletes the non-swap files in ``[min swap base, max swap next offset)``, which
misses an old segment whose base lies above the last offset the new segment kept, so a crash between its steps 2
and 3 can leave superseded records beside the cleaned ones (docs/compaction.md, "Crash safety: the swap, better than
Kafka's"). The intent names every replaced segment, so logfs never leaves a mix. A directory without an intent file
(written by Kafka, or a swap from a split) still gets Kafka's passes (``core/log/loader.py``).

Threads: :func:`create_cleaned_segment` the cleaner's; :func:`replace_segments` any thread, it takes the log's lock;
:func:`complete_interrupted_swap` the loader's. All block on the disk.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from logfs.core.durable import fsync_dir, replace_file
from logfs.core.errors import StorageError
from logfs.core.log.local import LocalLog, new_segment
from logfs.core.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    filename_prefix,
)
from logfs.core.logdirfailure import channel_for

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
INTENT_FILE = "cleaner-swap.intent"
INTENT_HEADER = "logfs cleaner swap 1"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def create_cleaned_segment(local: LocalLog, base_offset: int) -> LogSegment:
    """An empty segment at ``base_offset`` whose files are ``….cleaned`` (leftovers of an earlier attempt deleted
    first), with the log's config. Its ``.log`` exists (empty) from the start: a merge that keeps nothing still
    becomes a segment, as in Kafka."""
    stem = local.directory / filename_prefix(base_offset)
    for suffix in SEGMENT_SUFFIXES:
        for temp in (CLEANED_SUFFIX, SWAP_SUFFIX):
            unlink_store_file(Path(f"{stem}{suffix}{temp}"), missing_ok=True)
    segment = new_segment(local.directory, base_offset, local.config, local.handles, file_suffix=CLEANED_SUFFIX)
    segment.log_file.create()
    return segment


def replace_segments(local: LocalLog, new: LogSegment, old: Sequence[LogSegment], now_ms: int | None = None) -> bool:
    """Swap ``new`` (flushed, its files ``.cleaned``) in for ``old`` (consecutive segments of the log) as the module
    docstring says. False, and nothing changed, when ``old`` is no longer a run of the log's non-active segments
    (retention or a truncation changed the log during the round): the caller deletes ``new``."""
    directory = local.directory
    with local.lock:
        current = list(local.snapshot.segments)
        try:
            first = current.index(old[0])
        except ValueError:
            return False
        if current[first : first + len(old)] != list(old) or first + len(old) >= len(current):
            return False
        stem = filename_prefix(new.base_offset)
        kinds = [s for s in SEGMENT_SUFFIXES if (directory / f"{stem}{s}{CLEANED_SUFFIX}").exists()]
        lines = [INTENT_HEADER, f"new {new.base_offset} {','.join(kinds)}", *(f"old {s.base_offset}" for s in old)]
        replace_file(directory / INTENT_FILE, ("\n".join(lines) + "\n").encode())
        new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(directory)
        local.replace_segments(new, old, now_ms)
        new.change_file_suffixes(SWAP_SUFFIX, "")
        fsync_dir(directory)
        unlink_store_file(directory / INTENT_FILE)
        fsync_dir(directory)
    return True


def unlink_store_file(path: Path, *, missing_ok: bool = False) -> None:
    """Unlink a file of the store through its failure channel (``core/logdirfailure.py``): refused once the store is
    offline, and an I/O error takes it offline, as for every other file of the store (issue 16)."""
    with channel_for(path).guard(path, "unlink"):
        path.unlink(missing_ok=missing_ok)


def set_mtime(path: Path, mtime_s: float) -> None:
    """``os.utime`` of a file of the store through its failure channel (a cleaned segment takes its sources' mtime)."""
    with channel_for(path).guard(path, "utime"):
        os.utime(path, (mtime_s, mtime_s))


def discard_cleaned_segment(segment: LogSegment) -> None:
    """Delete a ``.cleaned`` segment that will not be swapped in (an aborted round)."""
    segment.close()
    segment.delete_if_exists()


def complete_interrupted_swap(directory: Path, report: Callable[[Path, str], None]) -> None:
    """Undo or complete the swap an intent file in ``directory`` describes (module docstring); ``report(path,
    what)`` hears of each file changed. StorageError for an intent file that cannot be read."""
    intent = directory / INTENT_FILE
    Path(f"{intent}.tmp").unlink(missing_ok=True)  # a write of the intent that never finished: no swap had begun
    if not intent.exists():
        return
    new_base, kinds, old_bases = _read_intent(intent)
    stem = directory / filename_prefix(new_base)
    if any(Path(f"{stem}{suffix}{CLEANED_SUFFIX}").exists() for suffix in kinds):
        for suffix in SEGMENT_SUFFIXES:
            for temp in (CLEANED_SUFFIX, SWAP_SUFFIX):
                path = Path(f"{stem}{suffix}{temp}")
                if path.exists():
                    path.unlink()
                    report(path, "deleted (an interrupted clean's swap, undone)")
    else:
        for base in old_bases:
            if base == new_base:
                continue
            for suffix in SEGMENT_SUFFIXES:
                path = directory / f"{filename_prefix(base)}{suffix}"
                if path.exists():
                    path.unlink()
                    report(path, "deleted (replaced by an interrupted clean's swap, completed)")
        for suffix in SEGMENT_SUFFIXES:
            swap, final = Path(f"{stem}{suffix}{SWAP_SUFFIX}"), Path(f"{stem}{suffix}")
            if swap.exists():
                os.replace(swap, final)
                report(swap, "renamed into place (an interrupted clean's swap, completed)")
            elif suffix not in kinds and final.exists():
                final.unlink()
                report(final, "deleted (a replaced segment's file the cleaned one has not)")
    fsync_dir(directory)
    intent.unlink()
    fsync_dir(directory)


def _read_intent(path: Path) -> tuple[int, list[str], list[int]]:
    """``(new base, the new segment's file suffixes, replaced bases)`` of an intent file."""
    try:
        lines = path.read_text().splitlines()
        if not lines or lines[0] != INTENT_HEADER:
            raise ValueError("not a cleaner swap intent")
        new_base: int | None = None
        kinds: list[str] = []
        old: list[int] = []
        for line in lines[1:]:
            fields = line.split()
            if fields[0] == "new":
                new_base = int(fields[1])
                kinds = [k for k in (fields[2].split(",") if len(fields) > 2 else []) if k]
            elif fields[0] == "old":
                old.append(int(fields[1]))
            else:
                raise ValueError(f"unknown line {line!r}")
        if new_base is None or not old or not set(kinds) <= set(SEGMENT_SUFFIXES):
            raise ValueError("incomplete")
    except (OSError, ValueError, IndexError) as exc:
        raise StorageError(f"cannot read the cleaner's swap intent {path}: {exc}") from exc
    return new_base, kinds, old


def intent_exists(directory: Path) -> bool:
    """Whether a swap was interrupted in ``directory`` (``logfs check`` reports it before the load completes it)."""
    with contextlib.suppress(OSError):
        return (directory / INTENT_FILE).exists()
    return False
