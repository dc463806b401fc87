"""Offline verification and repair of a store (``logfs check STORE [--repair]``).

:func:`check_store` reads everything and changes nothing: it takes the store's lock (so no mount owns it), validates
every batch of every segment the way recovery would (size, magic, CRC-32C, offsets within the segment), checks that
every offset index entry points at a batch boundary with a fitting offset and that the time index is sane, that the
checkpoint files parse (the log cleaner's too, ``core/log/cleaner/check.py``), and it lists quarantine files left by
earlier recoveries, what an interrupted clean left, and every symbolic link in the store (damage: a mount refuses the
store while one is there, core/storelinks.py; a partition directory or a ``.log`` that is a link is not read). Each
problem is a :class:`Finding`; ``damage=True`` ones make the command exit 1.

:func:`repair_store` recovers the store the way a mount does after a crash, but from offset 0 of every partition
(the recovery point is ignored): damaged tails and the segments after them go to quarantine files, indexes are
rebuilt, and the store is closed cleanly. It reports what it did as findings too.

``progress(done_bytes, total_bytes)`` is called as segments are read, for a progress line on a terminal.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from logfs.core.checkpoint import OffsetCheckpointFile
from logfs.core.errors import CorruptCheckpoint, CorruptIndex, CorruptRecord, LinkInStore
from logfs.core.log.cleaner.check import cleaner_findings
from logfs.core.log.handles import HandleCache
from logfs.core.log.index import OffsetIndex, TimeIndex
from logfs.core.log.loader import LoadEvent
from logfs.core.log.recovery import scan_segment
from logfs.core.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    QUARANTINE_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    offset_from_filename,
)
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.core.storedir import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    lock_store,
    stored_node_id,
)
from logfs.core.storelinks import find_links
from logfs.core.topicnames import parse_partition_dir

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing ``check`` found: where, what kind, a sentence, and whether it is damage."""

    path: Path
    kind: str
    detail: str
    damage: bool

    def __str__(self) -> str:
        return f"{'DAMAGE' if self.damage else 'note'}: {self.path}: {self.kind}: {self.detail}"


def check_store(path: str | os.PathLike[str], *, progress: Progress | None = None) -> list[Finding]:
    """Verify the store at ``path`` without changing it. StoreLocked if a process owns it."""
    root = Path(path)
    findings: list[Finding] = []
    lock_fd = lock_store(root)
    try:
        for name in (RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT):
            try:
                OffsetCheckpointFile(root / name).read()
            except CorruptCheckpoint as exc:
                findings.append(Finding(root / name, "checkpoint", str(exc), damage=True))
        clean = (root / CLEAN_SHUTDOWN_FILE).exists()
        if not clean:
            findings.append(Finding(root, "unclean", "no clean-shutdown marker: the next mount recovers", damage=False))
        links = set(find_links(root))  # a mount refuses the store until they are gone
        findings.extend(Finding(p, "link", str(LinkInStore(str(p))), damage=True) for p in sorted(links))
        partitions = sorted(
            d for d in root.iterdir() if d not in links and d.is_dir() and parse_partition_dir(d.name) is not None
        )
        logs = [f for d in partitions for f in d.iterdir() if f.name.endswith(LOG_SUFFIX) and f not in links]
        total = sum(f.stat().st_size for f in logs)
        done = 0
        handles = HandleCache(8)
        for directory in partitions:
            for f in sorted(directory.iterdir()):
                if f.name.endswith(QUARANTINE_SUFFIX) and f not in links:
                    findings.append(
                        Finding(f, "quarantine", f"{f.stat().st_size} bytes cut by an earlier recovery", damage=False)
                    )
            log_paths = sorted(f for f in directory.iterdir() if f.name.endswith(LOG_SUFFIX) and f not in links)
            for log_path in log_paths:
                # After a crash the active segment's indexes are still preallocated (zero-filled): the next mount
                # rebuilds them, so they are not damage.
                rebuilt_anyway = not clean and log_path == log_paths[-1]
                findings.extend(_check_segment(directory, log_path, handles, check_indexes=not rebuilt_anyway))
                done += log_path.stat().st_size
                if progress is not None:
                    progress(done, total)
        findings.extend(Finding(*f) for f in cleaner_findings(root, partitions))
    finally:
        os.close(lock_fd)
    return findings


def _check_segment(directory: Path, log_path: Path, handles: HandleCache, *, check_indexes: bool) -> list[Finding]:
    base = offset_from_filename(log_path.name)
    segment = LogSegment(directory, base, index_interval_bytes=4096, max_index_bytes=1 << 30, handles=handles)
    findings = []
    boundaries: dict[int, int] = {}
    try:
        result = scan_segment(segment, lambda b: boundaries.__setitem__(b.position, b.last_offset))
    except CorruptRecord as exc:
        return [Finding(log_path, "corrupt", exc.reason, damage=True)]
    if result.reason is not None:
        findings.append(
            Finding(log_path, "corrupt", f"{result.reason} at byte {result.valid_bytes}; "
                    f"{result.damaged_bytes} bytes after it would be cut", damage=True)
        )  # fmt: skip
    elif result.torn_tail:
        findings.append(
            Finding(log_path, "torn-tail", f"the file ends inside a batch at byte {result.valid_bytes}; "
                    f"{result.damaged_bytes} bytes would be cut", damage=True)
        )  # fmt: skip
    if not check_indexes:
        segment.close_handler()
        return findings
    index_path = log_path.with_suffix(INDEX_SUFFIX)
    if not index_path.exists():
        if result.total_bytes:
            findings.append(Finding(index_path, "missing-index", "the next mount rebuilds it", damage=True))
    else:
        index = OffsetIndex(index_path, base, writable=False)
        try:
            index.sanity_check()
            for n in range(index.entries()):
                entry = index.entry(n)
                if n > 0 and entry.offset == base:
                    break  # the zero-filled, preallocated tail of an active segment's index
                last = boundaries.get(entry.position)
                if last is None or last > entry.offset:
                    findings.append(
                        Finding(index_path, "bad-index", f"entry {n} ({entry.offset} at byte {entry.position}) "
                                "does not point at a batch holding that offset", damage=True)
                    )  # fmt: skip
                    break
        except CorruptIndex as exc:
            findings.append(Finding(index_path, "bad-index", exc.reason, damage=True))
        finally:
            index.close_handler()
    time_path = log_path.with_suffix(TIME_INDEX_SUFFIX)
    if time_path.exists():
        tindex = TimeIndex(time_path, base, writable=False)
        try:
            tindex.sanity_check()
        except CorruptIndex as exc:
            findings.append(Finding(time_path, "bad-index", exc.reason, damage=True))
        finally:
            tindex.close_handler()
    segment.close_handler()
    return findings


def repair_store(
    path: str | os.PathLike[str], config: StoreConfig | None = None, *, progress: Progress | None = None
) -> list[Finding]:
    """Recover every partition from offset 0 and close the store cleanly; what it did, as findings."""
    root = Path(path)
    os.close(lock_store(root))  # fail early, with the owner's pid, if a mount holds the store
    links = find_links(root)
    if links:  # as the open below would, but before the marker and the recovery point go
        raise LinkInStore(str(links[0]))
    (root / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
    (root / RECOVERY_POINT_CHECKPOINT).unlink(missing_ok=True)
    findings: list[Finding] = []

    def on_event(event: LoadEvent) -> None:
        findings.append(Finding(event.path, event.kind, event.detail, damage=False))

    if config is None:
        config = StoreConfig(node_id=stored_node_id(root))
    store = Store.open(root, config, on_event=on_event)
    if progress is not None:
        total = sum(log.size_bytes for _, log in store.logs())
        progress(total, total)
    store.close()
    return findings
