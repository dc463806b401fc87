"""Store topics at the edges of Kafka's name rules: the longest legal names keep their configs and can be deleted.

A topic may have 249 characters; the files the store makes for it (the overrides file with the ``.tmp`` of its
atomic replacement, the directory a deletion renames the partition to) must still fit a 255-byte file name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logfs.core.configtext import parse_store_config
from logfs.core.format.encode import encode_values
from logfs.core.store import Store
from logfs.core.topicnames import MAX_FILE_NAME_BYTES, overrides_file_name


@pytest.mark.parametrize("length", [1, 200, 213, 214, 227, 228, 232, 249])
def test_topics_up_to_249_characters_keep_configs_across_restarts_and_delete(tmp_path: Path, length: int) -> None:
    topic = "T" * (length - 1) + "x"
    store = Store.open(tmp_path, parse_store_config([]))
    store.create_topic(topic, 2)
    store.set_topic_overrides(topic, {"retention.ms": "3600000"})
    store.log(topic, 1).append_as_leader(bytearray(encode_values([b"v"], 1_700_000_000_000)), 0, 1_700_000_000_000)
    store.close()
    assert all(len(p.name) <= MAX_FILE_NAME_BYTES for p in tmp_path.iterdir())
    store = Store.open(tmp_path, parse_store_config([]))
    assert store.topic_config(topic).retention_ms == 3600000
    assert store.log(topic, 1).log_end_offset == 1
    store.delete_topic(topic)
    assert not store.has_topic(topic)
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # the renamed partitions are gone too
    assert not (tmp_path / overrides_file_name(topic)).exists()
    store.close()


def test_long_names_get_distinct_override_files() -> None:
    names = ["a" * 249, "a" * 248 + "b", "a" * 248, "a" * 150]
    files = {overrides_file_name(n) for n in names}
    assert len(files) == len(names)
    assert all(len(f) + len(".tmp") <= MAX_FILE_NAME_BYTES for f in files)
    assert overrides_file_name("short") == ".logfs-topic.short.properties"  # unchanged for every name that fits
