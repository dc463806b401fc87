"""Exactly-once for the ``logfs`` sink: its transactions, commit labels and fencing, through the mount's files.

The filesystem protocol (docs/mount.md, "Idempotent producers and transactions"; docs/spark.md, "Exactly once"):

* a task attempt begins its own transaction: ``mkdir MOUNT/.logfs/transactions/<transactional.id>-<random>``, and
  writes its rows to ``<that>/<topic>/<partition>/batches`` (invisible to ``committed/`` views until committed);
* Spark's commit of micro-batch ``b`` (driver side) commits each task's transaction with the label
  ``<transactional.id>.<b>.<task partition>``: ``echo "commit <label>" > <that>/control``. The label is recorded in
  the store's transaction log with the commit decision itself, atomically;
* before committing, the label is looked up (``MOUNT/.logfs/labels/<label>``): if it exists, that task's rows of
  micro-batch ``b`` were committed before — Spark is replaying a micro-batch whose commit it had not recorded (a crash
  after our commit) — so the new transaction is aborted instead: no duplicate;
* at each commit, any other open transaction of the query's ``transactional.id`` is a leftover (micro-batches run
  one after another): a killed driver's or executor's, aborted then so that it does not hold the last stable offset
  until its timeout — Kafka's fencing by transactional id;
* a failed task aborts its transaction; Spark's abort of a micro-batch aborts those of its tasks.

A replayed micro-batch must give every task partition the same rows as before (true of a deterministic query over
the ``logfs`` source, whose micro-batch offsets Spark keeps in its checkpoint).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
from pathlib import Path

_log = logging.getLogger(__name__)

TRANSACTIONS_DIR = ".logfs/transactions"
LABELS_DIR = ".logfs/labels"


class TransactionError(RuntimeError):
    """A transaction the mount refused to begin, commit or abort."""


def new_transaction(mount: Path, transactional_id: str) -> str:
    """Begin a transaction of a task attempt: ``<transactional.id>-<random>``; its name."""
    name = f"{transactional_id}-{secrets.token_hex(8)}"
    try:
        os.mkdir(mount / TRANSACTIONS_DIR / name)
    except OSError as exc:
        raise TransactionError(f"cannot begin transaction {name} under {mount}: {os.strerror(exc.errno or 0)}") from exc
    return name


def transaction_dir(mount: Path, name: str) -> Path:
    """Where a transaction's write files are: ``<dir>/<topic>/<partition>/batches``."""
    return mount / TRANSACTIONS_DIR / name


def label(transactional_id: str, batch_id: int, task_partition: int) -> str:
    return f"{transactional_id}.{batch_id}.{task_partition}"


def commit(mount: Path, name: str, commit_label: str | None = None) -> bool:
    """Commit transaction ``name`` (recording ``commit_label``); False, after aborting it, when the label was
    committed before (a replayed micro-batch)."""
    if commit_label is not None and (mount / LABELS_DIR / commit_label).exists():
        abort(mount, name)
        _log.info("logfs: %s was committed before (a replayed micro-batch): its new transaction is aborted",
                  commit_label)  # fmt: skip
        return False
    line = "commit" if commit_label is None else f"commit {commit_label}"
    _control(mount, name, line)
    return True


def abort(mount: Path, name: str) -> None:
    """Abort transaction ``name``; a transaction that is already gone (ended, timed out) is left alone."""
    try:
        _control(mount, name, "abort")
    except TransactionError as exc:
        if isinstance(exc.__cause__, OSError) and exc.__cause__.errno in (errno.ENOENT, errno.ESTALE):
            return
        raise


def abort_stale(mount: Path, transactional_id: str, keep: set[str]) -> list[str]:
    """Abort every open transaction of ``transactional_id`` but those in ``keep``; their names."""
    prefix = f"{transactional_id}-"
    try:
        names = sorted(n for n in os.listdir(mount / TRANSACTIONS_DIR) if n.startswith(prefix) and n not in keep)
    except OSError as exc:
        raise TransactionError(f"cannot list {mount / TRANSACTIONS_DIR}: {os.strerror(exc.errno or 0)}") from exc
    for name in names:
        abort(mount, name)
        _log.warning("logfs: aborted transaction %s, left open by an earlier run of the query", name)
    return names


def _control(mount: Path, name: str, line: str) -> None:
    path = mount / TRANSACTIONS_DIR / name / "control"
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, line.encode() + b"\n")
        finally:
            os.close(fd)
    except OSError as exc:
        raise TransactionError(f"{line} of transaction {name}: {os.strerror(exc.errno or 0)}") from exc
