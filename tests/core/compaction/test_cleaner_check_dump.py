"""``logfs check`` and ``logfs dump`` over a cleaned log: cleaned segments (gaps, 61-byte empty batches, delete
horizons) are no damage, the cleaner's checkpoint is verified, an interrupted clean is reported, and dump shows the
gaps."""

from __future__ import annotations

from pathlib import Path

from compaction_log import append, clean, int_record, open_log
from test_cleaner_scenarios import marker, txn_producer

from logfs.core.check import check_store
from logfs.core.log.cleaner.logcleaner import CLEANER_CHECKPOINT
from logfs.core.log.cleaner.swap import INTENT_FILE
from logfs.dump import DumpResult, dump_file


def cleaned_store(root: Path) -> Path:
    """A store with one cleaned partition: an aborted transaction (emptied, kept for its producer), tombstones,
    superseded values; closed cleanly."""
    log = open_log(root / "topic-0")
    send = txn_producer(log, 1)
    send([2, 3])
    marker(log, 1, commit=False)
    for i in range(40):
        append(log, int_record(i % 5, None if i % 7 == 0 else i))
    log.roll()
    clean(log, 0)
    log.close()
    return root / "topic-0"


def test_check_finds_no_damage_in_cleaned_segments(tmp_path: Path) -> None:
    cleaned_store(tmp_path)
    (tmp_path / CLEANER_CHECKPOINT).write_text("0\n1\ntopic 0 40\n")
    assert [f for f in check_store(tmp_path) if f.damage] == []


def test_check_reports_a_damaged_cleaner_checkpoint(tmp_path: Path) -> None:
    cleaned_store(tmp_path)
    (tmp_path / CLEANER_CHECKPOINT).write_text("0\n2\ntopic 0 40\n")
    damage = [f for f in check_store(tmp_path) if f.damage]
    assert [(f.path.name, f.kind) for f in damage] == [(CLEANER_CHECKPOINT, "checkpoint")]


def test_check_reports_an_interrupted_clean_and_stale_entries(tmp_path: Path) -> None:
    directory = cleaned_store(tmp_path)
    (directory / INTENT_FILE).write_text("logfs cleaner swap 1\nnew 0 .log\nold 0\n")
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"")
    (tmp_path / CLEANER_CHECKPOINT).write_text("0\n1\ngone 3 7\n")
    notes = {(f.path.name, f.kind) for f in check_store(tmp_path) if not f.damage}
    assert (INTENT_FILE, "interrupted-clean") in notes
    assert ("00000000000000000000.log.cleaned", "interrupted-clean") in notes
    assert (CLEANER_CHECKPOINT, "cleaner-checkpoint") in notes


def test_dump_shows_the_gaps(tmp_path: Path) -> None:
    """A gap the cleaner's checkpoint covers is "removed by compaction"; without the checkpoint it is only a gap
    (issue 23: dump does not guess where the gaps came from); either way a gap is not damage."""
    directory = cleaned_store(tmp_path)
    result = DumpResult()
    lines = [line for f in sorted(directory.glob("*.log")) for line in dump_file(f, records=True, result=result)]
    assert result.damaged == 0
    gaps = [line for line in lines if "gap: offsets" in line]
    assert gaps and not any("compaction" in g for g in gaps)
    active = max(int(f.name.split(".")[0]) for f in directory.glob("*.log"))
    (tmp_path / CLEANER_CHECKPOINT).write_text(f"0\n1\ntopic 0 {active}\n")  # the cleaner has been up to there
    result = DumpResult()
    lines = [line for f in sorted(directory.glob("*.log")) for line in dump_file(f, records=True, result=result)]
    assert result.damaged == 0
    gaps = [line for line in lines if "gap: offsets" in line]
    assert gaps and all("removed by compaction" in g for g in gaps)
    assert any("count: 0" in line for line in lines)  # the aborted producer's emptied batch
    assert any("deleteHorizonMs:" in line for line in lines)  # a kept tombstone's batch
