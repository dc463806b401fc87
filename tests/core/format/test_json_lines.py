"""``append.jsonl`` lines as records and batches (``core/format/lines.py``; docs/mount.md, "JSON lines in
(`append.jsonl`)"): the fields, their encodings, every malformed shape refused, and records cut into batches under a
size limit."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logfs.core.errors import InvalidJsonRecord
from logfs.core.format.batch import Header
from logfs.core.format.decode import decode_records
from logfs.core.format.lines import encode_record_batches, parse_json_lines, parse_json_record


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
    for bad in (b"[1]", b"{", b'{"timestamp":-1}', b'{"timestamp":true}', b'{"headers":3}',
                b'{"value":"!!","valueEncoding":"base64"}', b'{"value":"x","valueEncoding":"hex"}',
                b'{"value":"\\ud800"}', b'{"partition":"1"}'):  # fmt: skip
        with pytest.raises(InvalidJsonRecord):
            parse_json_record(bad, 0)
    records = [parse_json_record(b'{"key":"k","value":"%d"}' % i, 5).record for i in range(300)]
    batches = encode_record_batches(records, 2000)
    assert len(batches) > 1 and all(len(b) <= 2000 for b in batches)
    assert [r.value for b in batches for r in decode_records(b)] == [b"%d" % i for i in range(300)]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"value":"x","partiton":1}', "unknown field 'partiton'"),
        (b'{"value":"x","a":1,"b":2}', "unknown fields 'a', 'b'"),
        (b'{"key":5,"value":"x"}', "key must be a string or null, not a number (5)"),
        (b'{"key":{"id":1}}', "key must be a string or null, not an object"),
        (b'{"key":true}', "key must be a string or null, not a boolean"),
        (b'{"headers":[{"key":"h","vlaue":"x"}]}', "unknown field 'vlaue' (a header's fields are"),
        (b'{"headers":"h"}', "headers must be a list of {key, value} objects or an object"),
        (b'{"value":NaN}', "not JSON"),
        (b'{"value":1e400}', "not JSON"),
        (b'{"value":123456789012345678901234567890,"x":NaN}', "not JSON"),  # the exact-integer reader refuses too
        (b'"just a string"', "a record is a JSON object, not a string"),
        (b'{"timestamp":9223372036854775808}', "timestamp must be a non-negative 64-bit integer"),
    ],
)
def test_a_malformed_line_is_refused_with_a_reason_naming_what(line: bytes, reason: str) -> None:
    with pytest.raises(InvalidJsonRecord, match=reason.replace("(", r"\(").replace(")", r"\)").replace("{", r"\{")):
        parse_json_record(line, 0)


def test_the_fields_a_rendering_adds_are_ignored_so_rendered_lines_can_be_written_back() -> None:
    line = (b'{"topic":"t","partition":0,"offset":9,"timestamp":5,"timestampType":0,"key":null,"value":"v",'
            b'"headers":[{"key":"h","value":null}]}')  # fmt: skip
    r = parse_json_record(line, 99)
    assert (r.partition, r.record.timestamp, r.record.key, r.record.value) == (0, 5, None, b"v")
    assert r.record.headers == (Header("h", None),)


def test_headers_as_an_object_are_the_same_headers_as_the_list() -> None:
    as_object = parse_json_record(b'{"headers":{"source":"web","n":5,"gone":null}}', 0).record.headers
    as_list = parse_json_record(
        b'{"headers":[{"key":"source","value":"web"},{"key":"n","value":5},{"key":"gone","value":null}]}', 0
    ).record.headers
    assert as_object == as_list == (Header("source", b"web"), Header("n", b"5"), Header("gone", None))
    assert parse_json_record(b'{"headers":{}}', 0).record.headers == ()


def test_values_keep_the_bytes_the_spec_requires() -> None:
    """A string stores its text, null stores null, anything else its compact JSON text (UTF-8 as is); integers of
    any size stay exact."""
    def value(v: bytes) -> bytes | None:
        return parse_json_record(b'{"value":%s}' % v, 0).record.value

    assert value(rb'"a \"quoted\" \u00e9 text"') == 'a "quoted" é text'.encode()
    assert value(b"null") is None
    assert value(b'{ "a" : [1, 2.5, true, null],\n "b": "\\u00e9\\n" }') == b'{"a":[1,2.5,true,null],"b":"\xc3\xa9\\n"}'
    assert value(b"123456789012345678901234567890") == b"123456789012345678901234567890"
    assert value(b'{"id":-123456789012345678901234567890}') == b'{"id":-123456789012345678901234567890}'
    assert value(b"18446744073709551615") == b"18446744073709551615"
    assert value(b"false") == b"false"
    assert value(b"[]") == b"[]"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_any_json_value_is_stored_as_compact_text_that_reads_back_equal(v: Any) -> None:
    line = json.dumps({"value": v}, indent=1).encode("utf-8", "surrogatepass")
    try:
        stored = parse_json_record(line, 0).record.value
    except InvalidJsonRecord:
        assert any(0xD800 <= ord(c) <= 0xDFFF for c in json.dumps(v, ensure_ascii=False))  # a lone surrogate
        return
    if v is None:
        assert stored is None
    elif isinstance(v, str):
        assert stored == v.encode()
    else:
        assert stored is not None
        assert json.loads(stored) == v
        assert stored == compact(json.loads(stored))  # compact: no whitespace between tokens, UTF-8 as is


def compact(v: Any) -> bytes:
    try:
        return orjson.dumps(v)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode()


def test_a_refused_line_is_named_by_its_number_and_first_bytes() -> None:
    bad = b'{"value":"a value of text well beyond forty bytes","partiton":2}'
    with pytest.raises(InvalidJsonRecord) as refused:
        parse_json_lines([b'{"value":"ok"}', b"", bad, b"{"], 0)
    assert str(refused.value) == (
        "line 3 of the write ('{\"value\":\"a value of text well beyond fo…'): unknown field 'partiton' (a "
        "record's fields are headers, key, keyEncoding, offset, partition, timestamp, timestampType, topic, value, "
        "valueEncoding)"
    )
