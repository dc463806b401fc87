"""``append.jsonl`` lines as records and batches (``core/format/lines.py``, spec §4): the fields, their encodings,
every malformed shape refused, and records cut into batches under a size limit."""

from __future__ import annotations

import json

import pytest

from logfs.core.errors import InvalidJsonRecord
from logfs.core.format.decode import decode_records
from logfs.core.format.lines import encode_record_batches, parse_json_record


def test_json_records() -> None:
    r = parse_json_record(
        json.dumps({"key": "k", "value": [1, {"b": True}], "timestamp": 7, "partition": 2,
                    "headers": [{"key": "h", "value": "AP8=", "valueEncoding": "base64"}]}).encode(),
        99,
    )  # fmt: skip
    assert r.partition == 2
    assert (r.record.key, r.record.value, r.record.timestamp) == (b"k", b'[1,{"b":true}]', 7)
    assert r.record.headers[0].value == b"\x00\xff"
    assert parse_json_record(b'{"value":null}', 99).record.value is None
    assert parse_json_record(b'{"value":"x"}', 99).record.timestamp == 99
    assert parse_json_record('{"value":"é"}'.encode(), 99).record.value == "é".encode()
    for bad in (b"[1]", b"{", b'{"timestamp":-1}', b'{"timestamp":true}', b'{"headers":{}}',
                b'{"value":"!!","valueEncoding":"base64"}', b'{"value":"x","valueEncoding":"hex"}',
                b'{"value":"\\ud800"}', b'{"partition":"1"}'):  # fmt: skip
        with pytest.raises(InvalidJsonRecord):
            parse_json_record(bad, 0)
    records = [parse_json_record(b'{"key":"k","value":"%d"}' % i, 5).record for i in range(300)]
    batches = encode_record_batches(records, 2000)
    assert len(batches) > 1 and all(len(b) <= 2000 for b in batches)
    assert [r.value for b in batches for r in decode_records(b)] == [b"%d" % i for i in range(300)]
