"""What an open(2) of a write file makes: its :class:`WriteHandle` with the framer the file's kind takes (whole
RecordBatch frames for ``batches``, lines otherwise) and the longest line it accepts, so that a line too long is
refused (EFBIG) by the framer before anything is parsed (``core/format/framing.py``).

Apart from ``mount/operations.py`` because the limits are the write path's own rules (``max.message.bytes`` through
``mount/writes.py``'s :func:`max_batch_bytes`), not a FUSE handler's: the handler only checks the open's mode and
hands the handle a number.

Threads: the trio thread (no I/O: the limits come from the logs' configs in memory).
"""

from __future__ import annotations

import os

from logfs.core.format.framing import BatchFramer, LineFramer
from logfs.core.format.lines import max_text_line_bytes
from logfs.core.store import Store
from logfs.mount.handles import WriteHandle
from logfs.mount.nodes import Kind, Node
from logfs.mount.reads import Reader
from logfs.mount.transactions import Transactions
from logfs.mount.tree import Entry
from logfs.mount.writes import TEXT_KINDS, max_batch_bytes


def open_write_handle(
    store: Store, transactions: Transactions | None, reader: Reader, entry: Entry, flags: int, access: int
) -> WriteHandle:
    """The handle of a write file opened with ``flags`` (O_DSYNC: acks=all after each append) and ``access``."""
    kind = entry.node.kind
    if kind is Kind.BATCHES:
        framer: LineFramer | BatchFramer = BatchFramer(
            max_batch_bytes(store.log(entry.node.topic, entry.node.partition))
        )
    else:
        limit = max_line_bytes(store, entry.node)
        framer = LineFramer(limit, measure_every_line=kind in (Kind.APPEND_JSONL, Kind.TOPIC_APPEND_JSONL))
    h = WriteHandle(entry, framer, read_write=access == os.O_RDWR, sync=bool(flags & os.O_DSYNC))
    if entry.node.txn:  # writes land in the transaction's epoch of now: a later epoch fences them (ESTALE)
        assert transactions is not None
        h.txn = (entry.node.txn, transactions.epoch_of(entry.node.txn))
    if kind is Kind.CONFIG and h.read_write:
        h.responses += reader.status.render_config(entry.node.topic)
    return h


def max_line_bytes(store: Store, node: Node) -> int:
    """The longest line a write file takes (longer: EFBIG, decided by the framer before anything is parsed).
    ``append``: exactly the longest value a batch of one record holds within max.message.bytes (or
    segment.bytes), so a line is refused the same way whichever request completes it. ``append.jsonl``: twice
    that limit of JSON text, room for a value at the limit as base64 (4/3) or with escapes; the record each line
    makes is then held to the limit exactly by the encoder. Command lines: 1 MiB."""
    if node.kind in (Kind.APPEND, Kind.APPEND_JSONL):
        limit = max_batch_bytes(store.log(node.topic, node.partition))
    elif node.kind in (Kind.TOPIC_APPEND, Kind.TOPIC_APPEND_JSONL):
        limit = max_batch_bytes(store.log(node.topic, store.partitions(node.topic)[0]))
    else:
        return 1024 * 1024  # config and .logfs/ command lines
    return max_text_line_bytes(limit) if node.kind in TEXT_KINDS else 2 * limit
