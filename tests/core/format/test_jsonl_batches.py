"""``append.jsonl`` lines as producer batches: the compiled normaliser (core/cext/jsonlbatches.c) against the
reference (``lines.encode_jsonl_lines``: orjson parse, orjson compact value, encode_record_batches).

The compiled path takes a write only when every line is ``{"key": string or null, "value": any JSON}`` of the JSON
it handles itself, and then must give the reference's batches byte for byte; on anything else it answers None and
the reference decides (so every refusal is the reference's). Checked on generated JSON written in many ways
(whitespace, escapes, floats, non-ASCII), on damaged lines, on cuts under small limits, and on the benchmarks'
realistic events, which it must take (else the test would pass with a helper that takes nothing)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logfs.core import errors as core
from logfs.core.cext import CEXT
from logfs.core.format.batch import RECORD_BATCH_OVERHEAD
from logfs.core.format.decode import decode_records
from logfs.core.format.lines import LineRun, encode_jsonl_lines, encode_jsonl_run, encode_jsonl_run_c
from logfs.core.format.validate import validate_batch

needs_cext = pytest.mark.skipif(CEXT is None, reason="the C extension is not built")

NOW = 1_700_000_000_123


def _run(lines: list[bytes], split: int = 0, tail: bytes = b"") -> LineRun:
    """``lines`` as the framer hands them: the first ``split`` bytes kept from an earlier request (the head)."""
    text = b"\n".join(lines) + b"\n"
    split = min(split, len(lines[0]))
    return LineRun(text[:split], text[split:] + tail, len(text) - split)


def _reference(lines: list[bytes], limit: int) -> list[bytes] | type[Exception]:
    try:
        return [bytes(b) for b in encode_jsonl_lines(lines, NOW, limit)]
    except (core.InvalidJsonRecord, core.RecordTooLarge) as exc:
        return type(exc)


def _compiled(run: LineRun, limit: int) -> list[bytes] | type[Exception] | None:
    try:
        got = encode_jsonl_run_c(run, NOW, limit)
    except core.RecordTooLarge:
        return core.RecordTooLarge
    return None if got is None else [bytes(b) for b in got]


def _check(lines: list[bytes], limit: int = 1 << 20, split: int = 0, tail: bytes = b"") -> bool:
    """The compiled path equals the reference, or declines; True when it took the write."""
    run = _run(lines, split, tail)
    assert run.lines() == lines
    want = _reference(lines, limit)
    got = _compiled(run, limit)
    if got is None:
        return False
    if want is core.InvalidJsonRecord:
        pytest.fail(f"the compiled path took what the reference refuses: {lines!r}")
    assert got == want, lines
    return True


# --- generated JSON, written in many ways ---------------------------------------------------------------------------

_text = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]) | st.sampled_from('"\\/\x00\x1f\x7f\u2028é😀'), max_size=12
)
_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [0.0, -0.0, 1.0, 221.0, 1e-4, 1.5e-5, 0.0001, 123456789012345.6, 1e15, 1e16, 34.694, -8.054, 0.1, 2.5e300]
)
_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, 10**17, 10**18, -(10**18)]), _floats,
    _text,
)  # fmt: skip
_json: st.SearchStrategy[Any] = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


def _write(value: Any, style: int) -> str:
    """``value`` as JSON text of one of several writers: compact, spaced, ASCII-escaped, floats with trailing zeros."""
    if style == 0:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if style == 1:
        return json.dumps(value, separators=(" , ", " : "), ensure_ascii=True)
    if style == 2:  # floats written with a zero too many: 1.5 -> 1.50
        return json.dumps(value, separators=(",", ": "), ensure_ascii=False).replace(".5", ".50")
    return "\t" + json.dumps(value, ensure_ascii=False).replace("/", "\\/") + " \r"


@st.composite
def _lines(draw: st.DrawFn) -> bytes:
    style = draw(st.integers(0, 3))
    fields = []
    if draw(st.booleans()):
        fields.append('"key":' + _write(draw(st.none() | _text), style))
    if draw(st.integers(0, 5)):
        fields.append('"value":' + _write(draw(_json), style))
    if draw(st.integers(0, 20)) == 0:  # fields the compiled path leaves to the reference, or refused ones
        fields.append(draw(st.sampled_from(['"timestamp":5', '"partition":0', '"headers":{}', '"offset":3', '"x":1',
                                            '"key":"again"', '"key":5', '"value":"again"'])))  # fmt: skip
    fields = draw(st.permutations(fields))
    return ("{" + ",".join(fields) + "}").encode("utf-8", "surrogatepass")


@needs_cext
@settings(max_examples=600, deadline=None)
@given(lines=st.lists(_lines() | st.sampled_from([b"", b"  ", b"\t\r", b"\x0b"]), min_size=1, max_size=8))
def test_compiled_jsonl_equals_the_reference_on_generated_json(lines: list[bytes]) -> None:
    _check(lines)


@needs_cext
@settings(max_examples=400, deadline=None)
@given(value=_json, style=st.integers(0, 3))
def test_compiled_jsonl_takes_what_it_claims_to(value: Any, style: int) -> None:
    """A value without what the compiled path leaves to the reference (exponents, -0, long numbers, repeated names:
    none of them occur in orjson's compact text of small values) is taken, not declined."""
    line = b'{"key":"k","value":' + _write(value, style).encode("utf-8", "surrogatepass") + b"}"
    took = _check([line])
    if _plain(value) and style in (0, 1):
        assert took, line


def _plain(value: Any) -> bool:
    """Nothing the compiled path declines by design: exponents, long integers, fractions of more than 15 significant
    digits or below 0.0001 (a -0 integer cannot come from Python)."""
    if isinstance(value, float):
        text = repr(value)
        digits = text.lstrip("-").replace(".", "").lstrip("0").rstrip("0")
        return "e" not in text and (value == 0 or (abs(value) >= 1e-4 and len(digits) <= 15))
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) < 10**18
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(_plain(v) for v in value.values())
    return True


# --- damaged lines --------------------------------------------------------------------------------------------------


@needs_cext
@settings(max_examples=600, deadline=None)
@given(
    line=_lines(),
    edits=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255), st.integers(0, 2)), min_size=1, max_size=3),
)
def test_compiled_jsonl_on_damaged_lines_takes_nothing_the_reference_refuses(
    line: bytes, edits: list[tuple[int, int, int]]
) -> None:
    damaged = bytearray(line)
    for at, byte, kind in edits:
        at %= len(damaged) + 1
        if kind == 0 and at < len(damaged):
            damaged[at] = byte
        elif kind == 1:
            damaged.insert(at, byte)
        elif at < len(damaged):
            del damaged[at]
    _check([bytes(damaged).replace(b"\n", b" ")])


@needs_cext
@pytest.mark.parametrize(
    "line",
    [b"{", b"{}", b"[]", b'"x"', b"{} {}", b'{"key":"a",}', b'{"key":"a" "value":1}', b'{"value":01}',
     b'{"value":1.}', b'{"value":-}', b'{"value":tru}', b'{"value":"\\x"}', b'{"value":"\\ud800"}',
     b'{"value":"\\udc00\\ud800"}', b'{"value":"\xff"}', b'{"value":"\xed\xa0\x80"}', b'{"value":"\xc0\xaf"}',
     b'{"value":"a\tb"}', b'{"value":{"a":1,"a":2}}', b'{"value":1e5}', b'{"value":-0}', b'{"value":1.0000001e1}',
     b'{"value":12345678901234567890}', b'{"value":0.00001}', b'{"value":' + b"[" * 60 + b"]" * 60 + b"}",
     b'{"value":"\\u00e9\\/\\ud83d\\ude00\\u0001\\u001f\\"\\\\"}', b'{"key":"\\u0000","value":-0.0}',
     b'{"value":{"\\u0061":1,"a":2}}', b'{"value":{"a/":1,"a\\/":2}}', b'\xef\xbb\xbf{}'],
)  # fmt: skip
def test_compiled_jsonl_on_chosen_edges(line: bytes) -> None:
    _check([line])


@needs_cext
@pytest.mark.parametrize("special", ['\\"', "\\\\", "\\n", "\\u0007", "é", "\x7f", "\u2028", "😀", "\x1f", "\xff"])
def test_compiled_jsonl_finds_what_ends_a_plain_run_at_every_place(special: str) -> None:
    """The string loop skips plain ASCII eight bytes at a time: a byte that ends the run, in each of the places
    around those eight-byte steps (a raw control character or an invalid byte makes the line the reference's)."""
    for before in range(0, 20):
        for after in (0, 1, 7, 8, 9):
            text = "a" * before + special + "b" * after
            line = ('{"key":"' + text + '","value":{"' + text + '":"' + text + '"}}').encode()
            if special == "\xff":
                line = line.replace(b"\xc3\xbf", b"\xff")  # a byte that is no UTF-8
            took = _check([line])
            assert took or special in ("\x1f", "\xff"), line


# --- cuts, heads and tails ------------------------------------------------------------------------------------------


@needs_cext
@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.integers(0, 3000), min_size=1, max_size=40),
    split=st.integers(0, 60),
    tail=st.binary(max_size=10).map(lambda b: b.replace(b"\n", b"")),
    limit=st.integers(RECORD_BATCH_OVERHEAD + 1, 8000),
)
def test_compiled_jsonl_cuts_batches_as_the_reference(values: list[int], split: int, tail: bytes, limit: int) -> None:
    lines = [b'{"key":"user-%d","value":{"pad":"%s"}}' % (n, b"x" * n) if n % 7 else b'{"value":null}' for n in values]
    assert _check(lines, limit, split, tail)


@needs_cext
def test_a_record_too_large_refuses_the_write_both_ways() -> None:
    lines = [b'{"key":"a","value":1}', b'{"value":"' + b"y" * 20_000 + b'"}']
    with pytest.raises(core.RecordTooLarge):
        encode_jsonl_run_c(_run(lines), NOW, 10_000)
    with pytest.raises(core.RecordTooLarge):
        encode_jsonl_lines(lines, NOW, 10_000)


def test_a_declined_write_is_refused_by_the_reference_naming_its_line() -> None:
    lines = [b'{"key":"a","value":1}', b'{"key":5}']
    with pytest.raises(core.InvalidJsonRecord, match="line 2 of the write"):
        encode_jsonl_run(_run(lines), NOW, 1 << 20)


# --- the realistic events -------------------------------------------------------------------------------------------


def _realdata() -> Any:
    path = Path(__file__).resolve().parents[3] / "scripts" / "realdata.py"
    spec = importlib.util.spec_from_file_location("realdata_for_jsonl", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@needs_cext
def test_the_realistic_events_are_taken_and_equal_the_reference() -> None:
    realdata = _realdata()
    text = realdata.jsonl_lines(realdata.events(1 << 20, seed=3))
    lines = text.split(b"\n")[:-1]
    assert _check(lines, split=17)
    batches = encode_jsonl_run(_run(lines), NOW, 1 << 20)
    for b in batches:
        validate_batch(b, client=True)
    records = [r for b in batches for r in decode_records(b)]
    assert [orjson.loads(r.value or b"null") for r in records] == [orjson.loads(line)["value"] for line in lines]
