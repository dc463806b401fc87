"""The parts of a stored-batch rendering and their assembly into one output array.

A rendering is a list of parts, in order: bytes already joined, byte matrices (one row per line), and parts still
to write, which :func:`assemble` writes straight into the one output array (no intermediate copies): a
:class:`PlainBlock` (values copied through a strided view of the stored bytes, a newline after each) and
:class:`Rows` (JSON lines of one layout: a template row broadcast, then columns of bytes and digits). Any thread.
"""

from __future__ import annotations

from typing import NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

from logfs.core.format.columns import IntArray


class PlainBlock(NamedTuple):
    """Plain lines still to write: ``rows`` values of ``width`` bytes, ``step`` bytes apart from ``position`` of
    ``source``, each followed by a newline. Written straight into the output (no intermediate array)."""

    source: npt.NDArray[np.uint8]
    position: int
    rows: int
    width: int
    step: int

    @property
    def nbytes(self) -> int:
        return self.rows * (self.width + 1)


class Rows(NamedTuple):
    """Lines still to write, one row per record, all as long: a ``template`` row (the constant text, and the digits
    the numbers share at their head) broadcast to every row, then ``fills``: ``(column, what, k)`` writes the byte
    matrix ``what`` at ``column`` (k = -1) or the last ``k`` digits of the numbers ``what``. Written straight into
    the output."""

    template: bytes
    fills: list[tuple[int, IntArray | npt.NDArray[np.uint8], int]]
    rows: int

    @property
    def nbytes(self) -> int:
        return self.rows * len(self.template)

    def write(self, out: npt.NDArray[np.uint8]) -> None:
        rows = out.reshape(self.rows, len(self.template))
        rows[:] = np.frombuffer(self.template, dtype=np.uint8)
        for column, what, k in self.fills:
            if k < 0:
                if what.shape[1]:
                    rows[:, column : column + what.shape[1]] = what
                continue
            rest = what
            for i in range(k - 1, -1, -1):
                rest, digit = np.divmod(rest, 10)
                rows[:, column + i] = digit + 0x30


Part: TypeAlias = "bytes | npt.NDArray[np.uint8] | PlainBlock | Rows"


def assemble(parts: list[Part]) -> bytes | memoryview:
    """The parts one after the other: bytes, byte matrices (row after row) and plain blocks written in place."""
    if len(parts) == 1 and isinstance(parts[0], bytes):
        return parts[0]
    if not any(isinstance(p, (PlainBlock, Rows)) for p in parts):
        return b"".join(parts)  # type: ignore[arg-type]  # (numpy arrays are buffers)
    out = np.empty(sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts), dtype=np.uint8)
    at = 0
    for p in parts:
        if isinstance(p, PlainBlock):
            rows = out[at : at + p.nbytes].reshape(p.rows, p.width + 1)
            if p.width:
                rows[:, : p.width] = strided(p.source, p.position, p.rows, p.width, p.step)
            rows[:, p.width] = 0x0A
            at += p.nbytes
        elif isinstance(p, Rows):
            p.write(out[at : at + p.nbytes])
            at += p.nbytes
        elif isinstance(p, bytes):
            out[at : at + len(p)] = np.frombuffer(p, dtype=np.uint8)
            at += len(p)
        else:
            out[at : at + p.nbytes] = p.reshape(-1)
            at += p.nbytes
    return out.data


def strided(arr: npt.NDArray[np.uint8], position: int, rows: int, width: int, step: int) -> npt.NDArray[np.uint8]:
    """Rows of ``width`` bytes from ``position`` on, ``step`` bytes apart: a view, no copy."""
    return np.lib.stride_tricks.as_strided(arr[position:], shape=(rows, width), strides=(step, 1), writeable=False)
