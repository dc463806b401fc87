"""Control records: the key and value layouts of Kafka's transaction markers and other control batches.

A control batch (attributes bit 5) holds exactly one record whose key says what it is (``ControlRecordType``):
``version int16 = 0, type int16``. COMMIT and ABORT markers carry ``version int16 = 0, coordinator_epoch int32``
as their value (``EndTransactionMarker``); other types are left to their owners, and an unknown type is ignored, as
Kafka does. A key shorter than 4 bytes or with a negative version is an invalid record. Encoding a marker batch is
``encode.encode_end_txn_marker``.
"""

from __future__ import annotations

import struct
from enum import IntEnum

from logfs.core.errors import InvalidRecord


class ControlType(IntEnum):
    """The type in a control record's key (``ControlRecordType``); other values are UNKNOWN and ignored."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


CONTROL_KEY = struct.Struct(">hh")  # version, type
END_TXN_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def parse_control_key(key: bytes | None) -> ControlType | int:
    """The control type of a control record's key; an unknown type comes back as its int (Kafka ignores it)."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise InvalidRecord(f"control record key of {0 if key is None else len(key)} bytes, expected at least 4")
    version, ctype = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecord(f"control record key has negative version {version}")
    return ControlType(ctype) if ctype in ControlType.__members__.values() else ctype
