"""Where a forwarded handle may move to a new leader (mount/forwarding.py's ``Boundary``): only after a whole line
or a whole batch, however the bytes were cut into write requests; ``node.mounts``, the paths a node uses to
reach the others; and ``DirChange``, the line a forwarded mkdir, rmdir, group claim, group deletion or transaction's
begin is. Pure functions: the forwarding itself runs through real mounts in tests/cluster/test_cluster_forwarding.py."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from logfs.core.errors import ConfigError
from logfs.core.owners import Owner
from logfs.core.storeconfig import StoreConfig
from logfs.mount.errors import InvalidCommand
from logfs.mount.forwarding import Boundary, DirChange


def _batch(values: list[bytes], base: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)  # fmt: skip
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
    data = bytearray(builder.build())
    data[0:8] = base.to_bytes(8, "big")
    return bytes(data)


def test_lines_are_at_a_boundary_after_a_newline_only() -> None:
    b = Boundary(batches=False)
    assert b.at_boundary  # nothing written yet
    for chunk, expected in ((b"one\ntw", False), (b"o", False), (b"\n", True), (b"", True), (b"x\ny\n", True)):
        b.feed(chunk)
        assert b.at_boundary is expected, chunk


@pytest.mark.parametrize("step", [1, 5, 11, 12, 13, 61, 1000])
def test_batches_are_at_a_boundary_after_whole_batches_however_the_bytes_are_cut(step: int) -> None:
    stream = _batch([b"a" * 10, b"b" * 300]) + _batch([b"c"], base=2) + _batch([b"d" * 4000, b"e"], base=3)
    ends = {len(_batch([b"a" * 10, b"b" * 300]))}
    ends.add(max(ends) + len(_batch([b"c"], base=2)))
    ends.add(len(stream))
    b = Boundary(batches=True)
    written = 0
    while written < len(stream):
        chunk = stream[written : written + step]
        b.feed(chunk)
        written += len(chunk)
        assert b.at_boundary is (written in ends), written


def test_node_mounts_parse_and_refuse_what_is_not_id_path() -> None:
    config = StoreConfig(node_id=1, replica_ids=(1, 2, 3), node_mounts="2:/net/n2, 3:/net/host:3/mnt")
    assert config.node_mount_paths() == {2: "/net/n2", 3: "/net/host:3/mnt"}  # the first colon ends the id
    assert StoreConfig().node_mount_paths() == {}
    for bad in ("2", "x:/a", "2:relative", "2:/a,2:/b", ":/a", "²:/a", "-1:/a"):
        with pytest.raises(ConfigError, match=r"node\.mounts"):
            StoreConfig(node_mounts=bad)


@pytest.mark.parametrize(
    "change",
    [
        DirChange("mkdir", "orders", owner=Owner(1001, 100, 0o2750)),
        DirChange("mkdir", "__consumer_offsets-like.name_1", owner=Owner(0, 0, 0o755)),
        DirChange("mkdir", "orders", 7, uid=1001),
        DirChange("rmdir", "orders", uid=0),
        DirChange("claim", owner=Owner(1001, 100, 0o755), group="billing"),
        DirChange("delete-topic", "orders", uid=1001),
        DirChange("delete-records", "orders", 3, offset=120, uid=1001),
        DirChange("delete-records", "orders", 0, offset=0, uid=0),
        DirChange("claim", owner=Owner(0, 0, 0o755), group="_billing.eu-west_2"),
        DirChange("begin", owner=Owner(1001, 100, 0o755), group="orders-job"),
        DirChange("begin", owner=Owner(0, 0, 0o755), group="_spark.q-1_0"),
        DirChange("delete-group", uid=1001, group="billing"),
        DirChange("delete-group", uid=0, group="_billing.eu-west_2"),
    ],
)
def test_a_directory_change_is_one_line_that_parses_back_to_itself(change: DirChange) -> None:
    line = change.render()
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert DirChange.parse(line.decode().strip()) == change


@pytest.mark.parametrize(
    "line",
    ["", "mkdir", "mkdir orders", "mkdir orders 1 2", "mkdir orders 1 2 3 4", "mkdir orders 1 2 999",
     "mkdir orders -1 0 755", "mkdir orders 1 -2 755", "mkdir orders 1 2 17777", "mkdir orders/01", "mkdir orders/x",
     "mkdir /1", "mkdir orders/-1", "rmdir", "rmdir a b", "drop orders", "mkdir orders ١ 2 755", "MKDIR orders/1",
     "rmdir orders", "mkdir orders/1", "delete-topic orders", "delete-records o 1 5", "rmdir a\tb 1",
     "rmdir orders -1", "rmdir orders ١", "mkdir a/b/1 1",
     "delete-topic", "delete-topic a b", "delete-records o 1", "delete-records o 01 5", "delete-records o 1 -5",
     "delete-records o 1 x", "delete-records o 1 ٥",
     "claim 1 2", "claim 1 2 g", 'claim 1 2 "../x"', 'claim 1 2 "a b"',
     'claim 1 2 ""', "claim 1 2 7", 'claim -1 2 "g"', 'claim 1 ٢ "g"', 'claim 1 2 "g',
     "begin 1 2", "begin 1 2 job", 'begin 1 2 "a b"', 'begin 1 2 "../x"', 'begin 1 2 ""', 'begin -1 2 "job"',
     f'begin 1 2 "{"x" * 250}"', 'begin 1 2 "job', "begin 1 2 7",
     "delete-group 1", "delete-group 1 g", 'delete-group -1 "g"', 'delete-group 1 "a b"', 'delete-group 1 ""',
     'delete-group 1 2 "g"', 'delete-group ١ "g"'],
)  # fmt: skip
def test_anything_else_written_to_dirs_is_refused(line: str) -> None:
    with pytest.raises(InvalidCommand):
        DirChange.parse(line)


@pytest.mark.parametrize("name", ["a\nrmdir victim", "a b", "a\tb", "a\rb", "a\x00b", "a/b", ""])
def test_a_name_that_could_start_another_line_is_never_sent(name: str) -> None:
    with pytest.raises(InvalidCommand):
        DirChange("rmdir", name, uid=1001).render()
    with pytest.raises(InvalidCommand):
        DirChange("mkdir", name, owner=Owner(1001, 100, 0o755)).render()
