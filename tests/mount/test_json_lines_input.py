"""What ``append.jsonl`` takes (docs/mount.md, "JSON lines in (`append.jsonl`)"), through a real mount and real shell
tools: unknown fields and non-text keys refused with a reason that names the field and the line, headers as an object or
a list, values stored as compact JSON text with integers exact, and a write stored whole or not at all."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from conftest import Mount, errno_of, make_topic, sh, state, write_all


@pytest.fixture
def mnt(shared_mount: Mount) -> Path:
    shared_mount.allow_refusals(r"/jl-[a-z]+/(0/)?append\.jsonl", "(write|flush)")
    return shared_mount.path


def last_refusal(mnt: Path) -> dict[str, str]:
    return json.loads((mnt / ".logfs/errors").read_text().splitlines()[-1])


def rows(mnt: Path, topic: str) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in (mnt / topic / "0/at/0.jsonl").read_text().splitlines()]


def test_an_unknown_field_is_einval_naming_the_field_and_the_line(mnt: Path) -> None:
    make_topic(mnt, "jl-typo")
    payload = b'{"value":"one"}\n{"value":"two","partiton":1}\n'
    assert errno_of(write_all, mnt / "jl-typo/0/append.jsonl", payload) == errno.EINVAL
    assert state(mnt, "jl-typo")["log_end_offset"] == 0  # the good line before it is not stored either
    refusal = last_refusal(mnt)
    assert refusal["path"].endswith("jl-typo/0/append.jsonl") and refusal["errno"] == "EINVAL"
    assert refusal["reason"].startswith("line 2 of the write ('{\"value\":\"two\",\"partiton\":1}'): unknown field "
                                        "'partiton' (a record's fields are headers, key, ")  # fmt: skip


def test_a_key_that_is_not_text_is_refused_and_a_quoted_one_is_taken(mnt: Path) -> None:
    make_topic(mnt, "jl-keys")
    assert errno_of(write_all, mnt / "jl-keys/0/append.jsonl", b'{"key":5,"value":"v"}\n') == errno.EINVAL
    assert "key must be a string or null, not a number (5)" in last_refusal(mnt)["reason"]
    write_all(mnt / "jl-keys/0/append.jsonl", b'{"key":"5","value":"v"}\n{"key":null,"value":"w"}\n')
    assert [(r["key"], r["value"]) for r in rows(mnt, "jl-keys")] == [("5", "v"), (None, "w")]


def test_headers_may_be_an_object_or_a_list(mnt: Path) -> None:
    make_topic(mnt, "jl-headers")
    lines = [
        {"value": "a", "headers": {"source": "web", "retry": 2, "none": None}},
        {"value": "b", "headers": [{"key": "source", "value": "app"}, {"key": "bin", "value": "AP8=",
                                                                         "valueEncoding": "base64"}]},
    ]  # fmt: skip
    write_all(mnt / "jl-headers/0/append.jsonl", b"".join(json.dumps(x).encode() + b"\n" for x in lines))
    got = [r["headers"] for r in rows(mnt, "jl-headers")]
    assert got == [
        [{"key": "source", "value": "web"}, {"key": "retry", "value": "2"}, {"key": "none", "value": None}],
        [{"key": "source", "value": "app"}, {"key": "bin", "value": "AP8=", "valueEncoding": "base64"}],
    ]


def test_values_are_stored_as_compact_json_text_with_integers_exact(mnt: Path) -> None:
    make_topic(mnt, "jl-values")
    payload = (
        b'{"value": { "id" : 123456789012345678901234567890, "name": "\\u00e9t\\u00e9", "ok": true } }\n'
        b'{"value":"plain text"}\n'
        b'{"value":null}\n'
        b'{"value":[1, 2.5, -0.0, 1e-7]}\n'
    )
    write_all(mnt / "jl-values/0/append.jsonl", payload)
    assert [r["value"] for r in rows(mnt, "jl-values")] == [
        '{"id":123456789012345678901234567890,"name":"été","ok":true}',
        "plain text",
        None,
        "[1,2.5,-0.0,1e-7]",
    ]


def test_a_round_trip_of_rendered_lines_through_cat(mnt: Path, tmp_path: Path) -> None:
    """``.jsonl`` lines read back carry topic, partition, offset and timestampType: written again with ``cat``,
    those are ignored and the records come out the same."""
    make_topic(mnt, "jl-source")
    make_topic(mnt, "jl-copy")
    write_all(mnt / "jl-source/0/append.jsonl",
              b'{"key":"k","value":"v","headers":{"h":"x"}}\n{"value":{"n":1}}\n')  # fmt: skip
    done = sh("cat jl-source/0/at/0.jsonl > jl-copy/0/append.jsonl", mnt)
    assert done.returncode == 0, done.stderr
    strip = [{k: r[k] for k in ("key", "value", "headers", "timestamp")} for r in rows(mnt, "jl-source")]
    assert [{k: r[k] for k in ("key", "value", "headers", "timestamp")} for r in rows(mnt, "jl-copy")] == strip


def test_a_bad_line_in_a_big_write_names_its_number_and_stores_nothing(mnt: Path, tmp_path: Path) -> None:
    """A 100 KiB file with one bad line, written by ``cat`` in one write: the reason names that line and nothing of
    the file is stored (``cat file > append.jsonl`` is the all-or-nothing way, docs/mount.md)."""
    make_topic(mnt, "jl-big")
    lines = [b'{"key":"user-%d","value":{"n":%d,"pad":"%s"}}' % (i, i, b"x" * 60) for i in range(1000)]
    lines[733] = b'{"key":"user-733","value":{"n":733,}'
    source = tmp_path / "events.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    assert len(source.read_bytes()) < 128 * 1024  # one write request (cat's buffer)
    done = sh(f"cat {source} > jl-big/0/append.jsonl", mnt)
    assert done.returncode != 0 and "Invalid argument" in done.stderr
    assert state(mnt, "jl-big")["log_end_offset"] == 0
    reason = last_refusal(mnt)["reason"]
    assert reason.startswith('line 734 of the write (\'{"key":"user-733","value":{"n":733,}\'): not JSON')


def test_the_topic_file_refuses_an_unknown_field_before_it_partitions(mnt: Path) -> None:
    make_topic(mnt, "jl-topic", partitions=2)
    fd = os.open(mnt / "jl-topic/append.jsonl", os.O_WRONLY)
    try:
        assert errno_of(os.write, fd, b'{"key":"a","value":"1"}\n{"key":"b","vaule":"2"}\n') == errno.EINVAL
    finally:
        os.close(fd)
    assert "unknown field 'vaule'" in last_refusal(mnt)["reason"]
    assert state(mnt, "jl-topic", 0)["log_end_offset"] == state(mnt, "jl-topic", 1)["log_end_offset"] == 0
