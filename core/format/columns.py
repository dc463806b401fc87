"""Where the fields of each record of a batch lie: the columns every walker returns and every reader consumes.

A walk (``core/format/records.py``, ``core/format/numpywalk.py``) finds the position and length of each record's key
and value once; decoding (``core/format/decode.py``), the renderers and the Arrow conversion then slice the buffer
without walking it again. Columns are plain lists from the reference walker and numpy arrays from the vectorised
ones; consumers convert only what they read (:meth:`RecordColumns.lists`, :meth:`RecordColumns.value_spans`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from logfs.core.format.recordruns import WalkBuffer

Buffer: TypeAlias = bytes | bytearray  # what columns hold: always an owning buffer (see owning)
IntColumn: TypeAlias = list[int] | npt.NDArray[np.int64]
IntArray: TypeAlias = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class RecordColumns:
    """Where each record's fields lie in ``data``, indexed by record number.

    A null key or value has length -1 (its position is where it would start). The integer columns are lists from
    the reference walker and numpy arrays from the fast one (converting 10,000-entry arrays to lists costs ~30 ns
    an entry, so it is done only for the columns a consumer needs: see :meth:`lists` and :meth:`value_spans`).
    ``headers`` holds, per record, the decoded ``(key, value)`` pairs, or None for the records that have none.
    """

    data: Buffer
    timestamp_delta: IntColumn
    offset_delta: IntColumn
    key_position: IntColumn
    key_length: IntColumn
    value_position: IntColumn
    value_length: IntColumn
    headers: Sequence[list[tuple[str, bytes | None]] | None]

    def __len__(self) -> int:
        return len(self.offset_delta)

    def lists(self) -> RecordColumns:
        """The same columns as plain lists, for per-record access (indexing a numpy array is ~100 ns)."""
        if isinstance(self.offset_delta, list):
            return self
        return RecordColumns(
            self.data,
            _as_list(self.timestamp_delta),
            _as_list(self.offset_delta),
            _as_list(self.key_position),
            _as_list(self.key_length),
            _as_list(self.value_position),
            _as_list(self.value_length),
            self.headers,
        )

    def value_spans(self, first: int = 0) -> tuple[list[int], list[int]]:
        """Start and end positions of the values of records ``first…``; a null value is an empty span."""
        vp, vl = self.value_position, self.value_length
        if isinstance(vp, np.ndarray) and isinstance(vl, np.ndarray):
            starts = vp[first:]
            return starts.tolist(), (starts + np.maximum(vl[first:], 0)).tolist()
        starts_l = _as_list(vp)[first:]
        return starts_l, [p + n if n > 0 else p for p, n in zip(starts_l, _as_list(vl)[first:], strict=True)]


def _as_list(column: IntColumn) -> list[int]:
    return column.tolist() if isinstance(column, np.ndarray) else column


def owning(data: WalkBuffer) -> Buffer:
    """The buffer a RecordColumns keeps: positions index it, so a view is copied whole (only control batches and
    reads ask for columns of a view, and both are small or already owned)."""
    return data.tobytes() if isinstance(data, memoryview) else data
