"""A last line without a newline is checked only at close (issue 15 item 8, docs/mount.md "End every line with a
newline"): through a real mount and bash, a good unfinished line is stored at close, a bad one is refused at close
where bash's ``>>`` ignores the error (exit 0, nothing printed, the reason in ``.logfs/errors``), and with the
newline the write itself fails and bash says so."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Mount, make_topic, sh


def _values(topic: Path) -> list[str]:
    return (topic / "0" / "at" / "earliest").read_text().splitlines()


def test_a_last_line_without_newline_is_stored_or_refused_at_close(shared_mount: Mount) -> None:
    shared_mount.allow_refusals("/unfinished/0/append.jsonl")
    topic = make_topic(shared_mount.path, "unfinished")
    done = sh("""echo -n '{"value":"kept"}' >> unfinished/0/append.jsonl""", shared_mount.path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert _values(topic) == ["kept"]

    done = sh("echo -n '{bad' >> unfinished/0/append.jsonl", shared_mount.path)
    assert done.returncode == 0 and done.stderr == ""  # bash ignores close(2)'s EINVAL: the user sees nothing
    assert _values(topic) == ["kept"]
    refusal = json.loads((shared_mount.path / ".logfs" / "errors").read_text().splitlines()[-1])
    assert refusal["path"] == "/unfinished/0/append.jsonl" and refusal["reason"].startswith("line 1 of the write")

    for command in ("printf '{bad\\n'", "echo '{bad'"):  # with the newline the write fails, and bash says so
        done = sh(f"{command} >> unfinished/0/append.jsonl", shared_mount.path)
        assert done.returncode == 1 and "write error: Invalid argument" in done.stderr, done.stderr
    done = sh("""printf '%s\\n' '{"value":"next"}' >> unfinished/0/append.jsonl""", shared_mount.path)
    assert done.returncode == 0, done.stderr
    assert _values(topic) == ["kept", "next"]
