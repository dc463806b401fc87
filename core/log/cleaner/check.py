"""What ``logfs check`` verifies of the log cleaner's files (``core/check.py`` calls :func:`cleaner_findings`).

* ``cleaner-offset-checkpoint`` at the store root parses in Kafka's checkpoint format (damage when it does not: the
  cleaner would start over from each log's start, which is safe but means its progress was lost), and each entry
  names a partition the store holds (a note otherwise: the next round drops it);
* a partition holding ``cleaner-swap.intent`` had a swap interrupted: a note, since the next load completes or
  undoes it whole (``core/log/cleaner/swap.py``);
* ``.cleaned`` and ``.swap`` files are notes too: leftovers of an interrupted round, which the next load deletes
  or renames into place.

The cleaned segments themselves are checked as every segment is (every batch's framing, CRC and offsets; the
indexes): a cleaned segment is an ordinary segment with gaps in its offsets, and empty batches of 61 bytes.

Threads: any; reads only.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from logfs.core.checkpoint import OffsetCheckpointFile
from logfs.core.errors import CorruptCheckpoint
from logfs.core.log.cleaner.logcleaner import CLEANER_CHECKPOINT
from logfs.core.log.cleaner.swap import CLEANED_SUFFIX, INTENT_FILE, SWAP_SUFFIX


class CleanerFinding(NamedTuple):
    """One finding, as ``core/check.py``'s Finding takes it."""

    path: Path
    kind: str
    detail: str
    damage: bool


def cleaner_findings(root: Path, partitions: list[Path]) -> list[CleanerFinding]:
    """The findings about the cleaner's files in store ``root`` with partition directories ``partitions``."""
    findings: list[CleanerFinding] = []
    checkpoint = root / CLEANER_CHECKPOINT
    try:
        entries = OffsetCheckpointFile(checkpoint).read()
    except CorruptCheckpoint as exc:
        findings.append(CleanerFinding(checkpoint, "checkpoint", f"{exc}; compacted logs would be cleaned from "
                                       "their start", damage=True))  # fmt: skip
        entries = {}
    names = {p.name for p in partitions}
    for tp in sorted(entries):
        if f"{tp.topic}-{tp.partition}" not in names:
            findings.append(CleanerFinding(checkpoint, "cleaner-checkpoint", f"entry for {tp.topic}-{tp.partition}, "
                                           "which the store does not hold", damage=False))  # fmt: skip
    for directory in partitions:
        if (directory / INTENT_FILE).exists():
            detail = "a clean's swap was interrupted: the next mount completes or undoes it"
            findings.append(CleanerFinding(directory / INTENT_FILE, "interrupted-clean", detail, damage=False))
        for f in sorted(directory.iterdir()):
            if f.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)):
                findings.append(CleanerFinding(f, "interrupted-clean", "left by an interrupted clean: the next "
                                               "mount deletes it or renames it into place", damage=False))  # fmt: skip
    return findings
