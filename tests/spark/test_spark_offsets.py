"""The Spark source's options and offset arithmetic as pure functions: no Spark session, no mount.

minPartitions and maxOffsetsPerTrigger are checked against the numbers Spark's own KafkaOffsetRangeCalculatorSuite
and KafkaMicroBatchSourceSuite expect; JSON offsets against the Kafka source's format.
"""

from __future__ import annotations

import pytest

from logfs.core.format.compression import Compression
from logfs.spark.offsets import (
    DataLoss,
    OffsetError,
    OffsetRange,
    PartitionState,
    TimestampSpec,
    clamp_start,
    offsets_from_json,
    offsets_to_json,
    parse_offset_spec,
    plan_batch,
    rate_limit,
    resolve_found,
    resolve_offsets,
    split_ranges,
)
from logfs.spark.options import OptionError, Subscription, sink_options, source_options

STATES = {
    ("a", 0): PartitionState(log_start_offset=0, high_watermark=100, last_stable_offset=90),
    ("a", 1): PartitionState(log_start_offset=10, high_watermark=20, last_stable_offset=20),
    ("b", 0): PartitionState(log_start_offset=0, high_watermark=0, last_stable_offset=0),
}


# --- options ----------------------------------------------------------------------------------------------------------


def test_source_options_have_spark_kafka_defaults() -> None:
    o = source_options({"path": "/mnt", "subscribe": "a, b"}, streaming=False)
    assert o.subscription == Subscription(topics=("a", "b"))
    assert (o.starting, o.ending) == ("earliest", "latest")
    assert not o.read_committed and not o.include_headers and o.fail_on_data_loss
    assert o.min_partitions is None and o.poll_timeout_s == 120.0
    stream = source_options({"path": "/mnt", "subscribePattern": "a.*"}, streaming=True)
    assert stream.starting == "latest" and stream.subscription.matches("ab") and not stream.subscription.matches("ba")


def test_source_options_are_case_insensitive_and_accept_the_isolation_synonym() -> None:
    o = source_options(
        {"PATH": "/mnt", "SUBSCRIBE": "a", "isolation.level": "read_committed", "INCLUDEHEADERS": "TRUE"},
        streaming=False,
    )
    assert o.read_committed and o.include_headers
    assert source_options({"path": "/m", "assign": '{"a": [1, 0, 1]}'}, streaming=False).subscription == Subscription(
        assign=(("a", 0), ("a", 1))
    )


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a"}, False, "mount point"),
        ({"path": "/m"}, False, "exactly one of"),
        ({"path": "/m", "subscribe": "a", "assign": '{"a": [0]}'}, False, "exactly one of"),
        ({"path": "/m", "subscribePattern": "("}, False, "regular expression"),
        ({"path": "/m", "assign": "[0]"}, False, "assign"),
        ({"path": "/m", "subscribe": "a", "startingOffsets": "latest"}, False, "batch"),
        ({"path": "/m", "subscribe": "a", "endingOffsets": "earliest"}, False, "earliest"),
        ({"path": "/m", "subscribe": "a", "endingOffsets": "latest"}, True, "batch queries only"),
        ({"path": "/m", "subscribe": "a", "maxOffsetsPerTrigger": "10"}, False, "streaming"),
        ({"path": "/m", "subscribe": "a", "minPartitions": "0"}, False, "minPartitions"),
        ({"path": "/m", "subscribe": "a", "maxRecordsPerPartition": "-3"}, False, "maxRecordsPerPartition"),
        ({"path": "/m", "subscribe": "a", "failOnDataLoss": "maybe"}, False, "failOnDataLoss"),
        ({"path": "/m", "subscribe": "a", "kafka.isolation.level": "serializable"}, False, "isolation"),
        ({"path": "/m", "subscribe": "a", "startingOffsets": "{bad"}, False, "startingOffsets"),
        ({"path": "/m", "subscribe": "a", "minOffsetsPerTrigger": "10"}, True, "not supported"),
        ({"path": "/m", "subscribe": "a", "startingTimestamp": "yesterday"}, False, "startingTimestamp"),
        ({"path": "/m", "subscribe": "a", "startingOffsetsByTimestamp": "[1]"}, False, "startingOffsetsByTimestamp"),
        ({"path": "/m", "subscribe": "a", "endingOffsetsByTimestamp": '{"a": {"0": -1}}'}, False, "negative"),
        ({"path": "/m", "subscribe": "a", "endingTimestamp": "5"}, True, "batch queries only"),
        ({"path": "/m", "subscribe": "a", "startingOffsetsByTimestampStrategy": "skip"}, False, "error or latest"),
    ],
)
def test_bad_source_options_are_refused_naming_the_option(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    with pytest.raises(OptionError, match=message):
        source_options(options, streaming=streaming)


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a, b c"}, False, r"option subscribe: topic name 'b c' has characters outside"),
        ({"subscribe": "ok,../x"}, False, r"option subscribe: topic name '../x' has characters outside"),
        ({"subscribe": ".."}, False, r"option subscribe: topic name '..' is not allowed"),
        ({"subscribe": "x" * 250}, False, r"option subscribe: topic name of 250 characters exceeds 249"),
        ({"assign": '{"a/b": [0]}'}, False, r"option assign: topic name 'a/b' has characters outside"),
        ({"subscribe": "a", "startingOffsets": '{"a\\u0000": {"0": 1}}'}, False, r"startingOffsets: topic name"),
        ({"subscribe": "a", "startingOffsets": "group:a b"}, False, r"group id 'a b' has characters outside"),
        ({"subscribe": "a", "startingOffsets": "group:" + "g" * 250}, False, r"group id of 250 characters"),
        ({"subscribe": "a", "endingOffsetsByTimestamp": '{".x": {"0": 1}}'}, False, r"topic name '.x' starts with"),
        ({"subscribe": "a", "commitToGroup": "../g"}, True, r"option commitToGroup: group id '../g' has characters"),
    ],
)
def test_names_in_source_options_follow_kafkas_rules(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        source_options({"path": "/m", **options}, streaming=streaming)


def test_names_that_follow_the_rules_are_taken_as_they_are() -> None:
    o = source_options({"path": "/m", "subscribe": "a.b,_c,-d", "commitToGroup": "_g-1.x"}, streaming=True)
    assert o.subscription.topics == ("a.b", "_c", "-d") and o.commit_to_group == "_g-1.x"
    assert sink_options({"path": "/m", "topic": "L" * 249}).topic == "L" * 249
    with pytest.raises(OptionError, match="option topic: topic name 'a b' has characters outside"):
        sink_options({"path": "/m", "topic": "a b"})


def test_sink_options() -> None:
    s = sink_options({"path": "/m", "topic": "out", "kafka.compression.type": "zstd"})
    assert (s.path, s.topic, s.compression) == ("/m", "out", Compression.ZSTD)
    assert sink_options({"path": "/m"}).topic is None
    with pytest.raises(OptionError, match=r"transactional\.id"):
        sink_options({"path": "/m", "exactlyOnce": "true"})
    with pytest.raises(OptionError, match=r"transactional\.id must be"):
        sink_options({"path": "/m", "exactlyOnce": "true", "transactional.id": "a/b"})
    assert sink_options({"path": "/m", "exactlyOnce": "true", "kafka.transactional.id": "clicks"}).transactional_id == (
        "clicks"
    )
    assert sink_options({"path": "/m", "transactional.id": "clicks"}).transactional_id is None  # at-least-once
    with pytest.raises(OptionError, match="compression"):
        sink_options({"path": "/m", "kafka.compression.type": "brotli"})
    assert sink_options({"path": "/m"}).delivery_timeout_ms == 120_000  # Kafka's producer's delivery.timeout.ms
    assert sink_options({"path": "/m", "kafka.delivery.timeout.ms": "5000"}).delivery_timeout_ms == 5000
    assert sink_options({"path": "/m", "delivery.timeout.ms": "7"}).delivery_timeout_ms == 7
    for bad in ("0", "-1", "soon"):
        with pytest.raises(OptionError, match=r"kafka\.delivery\.timeout\.ms must be a positive integer"):
            sink_options({"path": "/m", "kafka.delivery.timeout.ms": bad})


# --- offsets as JSON --------------------------------------------------------------------------------------------------


def test_offsets_json_round_trip_is_spark_kafka_format() -> None:
    offsets = {("b", 10): 5, ("a", 2): 7, ("a", 0): -2}
    as_json = offsets_to_json(offsets)
    assert as_json == {"a": {"0": -2, "2": 7}, "b": {"10": 5}}
    assert list(as_json) == ["a", "b"]
    assert offsets_from_json(as_json) == offsets
    assert parse_offset_spec('{"a":{"0":23,"1":-2},"b":{"0":-1}}', "x") == {("a", 0): 23, ("a", 1): -2, ("b", 0): -1}
    assert parse_offset_spec(" Earliest ", "x") == "earliest"


@pytest.mark.parametrize("text", ['{"a": 1}', '{"a": {"x": 1}}', '{"a": {"0": -3}}', '{"a": {"0": true}}', "[1]"])
def test_malformed_offsets_json_is_refused(text: str) -> None:
    with pytest.raises(OffsetError):
        parse_offset_spec(text, "startingOffsets")


# --- resolving and planning -------------------------------------------------------------------------------------------


def test_earliest_and_latest_resolve_to_log_start_and_hw_or_lso() -> None:
    assert resolve_offsets("earliest", STATES, read_committed=False, option="s") == {
        ("a", 0): 0,
        ("a", 1): 10,
        ("b", 0): 0,
    }
    assert resolve_offsets("latest", STATES, read_committed=False, option="s")[("a", 0)] == 100
    assert resolve_offsets("latest", STATES, read_committed=True, option="s")[("a", 0)] == 90


def test_json_spec_must_name_every_partition_and_resolves_minus_one_and_minus_two() -> None:
    spec = {("a", 0): 5, ("a", 1): -2, ("b", 0): -1}
    assert resolve_offsets(spec, STATES, read_committed=False, option="s") == {("a", 0): 5, ("a", 1): 10, ("b", 0): 0}
    with pytest.raises(OffsetError, match="missing: b-0"):
        resolve_offsets({("a", 0): 5, ("a", 1): 10}, STATES, read_committed=False, option="s")
    with pytest.raises(OffsetError, match="not subscribed or not found: c-0"):
        resolve_offsets({**spec, ("c", 0): 1}, STATES, read_committed=False, option="s")
    with pytest.raises(OffsetError, match="latest"):
        resolve_offsets(spec, STATES, read_committed=False, option="s", allow_latest=False)


def test_timestamp_options_take_spark_precedence_over_offsets() -> None:
    """startingTimestamp over startingOffsetsByTimestamp over startingOffsets; the same for the ending ones."""
    o = source_options(
        {"path": "/m", "subscribe": "a", "startingTimestamp": "1000", "startingOffsetsByTimestamp": '{"a": {"0": 5}}',
         "startingOffsets": "earliest", "endingOffsetsByTimestamp": '{"a": {"0": 9}}', "endingOffsets": "latest"},
        streaming=False,
    )  # fmt: skip
    assert o.starting == TimestampSpec(every=1000) and o.ending == TimestampSpec(by_partition={("a", 0): 9})
    assert o.timestamp_no_match == "error"
    o = source_options({"path": "/m", "subscribe": "a", "STARTINGOFFSETSBYTIMESTAMPSTRATEGY": "Latest"}, streaming=True)
    assert o.starting == "latest" and o.timestamp_no_match == "latest"


def test_a_timestamp_spec_names_every_partition_and_resolves_like_spark() -> None:
    assert TimestampSpec(every=7).timestamps(STATES, "s") == {("a", 0): 7, ("a", 1): 7, ("b", 0): 7}
    with pytest.raises(OffsetError, match="missing: b-0"):
        TimestampSpec(by_partition={("a", 0): 1, ("a", 1): 1}).timestamps(STATES, "s")
    found = {("a", 0): 42, ("a", 1): None, ("b", 0): 0}
    with pytest.raises(OffsetError, match="a-1 has no record at or after"):  # a start, Spark's default strategy
        resolve_found(found, STATES, read_committed=False, no_match="error", option="startingOffsets")
    latest = resolve_found(found, STATES, read_committed=True, no_match="latest", option="startingOffsets")
    assert latest == {("a", 0): 42, ("a", 1): 20, ("b", 0): 0}
    end = resolve_found({**found, ("a", 0): None}, STATES, read_committed=True, no_match=None, option="endingOffsets")
    assert end == {("a", 0): 90, ("a", 1): 20, ("b", 0): 0}  # an end with no record that late: latest (the LSO here)
    appended = resolve_found({("a", 0): 95, ("a", 1): 12, ("b", 0): 0}, STATES, read_committed=False, no_match=None,
                             option="endingOffsets")  # fmt: skip
    assert appended == {("a", 0): 95, ("a", 1): 12, ("b", 0): 0}
    pinned = resolve_found({("a", 0): 95}, STATES, read_committed=True, no_match="error", option="startingOffsets")
    assert pinned == {("a", 0): 90}  # found past what the states pinned (appended since): their end


def test_plan_batch_drops_empty_ranges_and_applies_fail_on_data_loss() -> None:
    starting = {("a", 0): 40, ("a", 1): 5, ("b", 0): 0}
    ending = {("a", 0): 60, ("a", 1): 20, ("b", 0): 0}
    with pytest.raises(DataLoss, match=r"a-1: offsets 5\.\.9 are gone"):
        plan_batch(starting, ending, STATES, read_committed=False, fail_on_data_loss=True)
    assert plan_batch(starting, ending, STATES, read_committed=False, fail_on_data_loss=False) == [
        OffsetRange("a", 0, 40, 60),
        OffsetRange("a", 1, 10, 20),
    ]
    with pytest.raises(OffsetError, match="past its last stable offset 90"):
        plan_batch(starting, {**ending, ("a", 0): 95}, STATES, read_committed=True, fail_on_data_loss=True)
    with pytest.raises(OffsetError, match="after the ending offset"):
        plan_batch({**starting, ("a", 0): 70}, ending, STATES, read_committed=False, fail_on_data_loss=True)
    # a range wholly below the log start offset is skipped, not an error, when data loss is allowed
    assert (
        plan_batch(
            {("a", 1): 2}, {("a", 1): 8}, {("a", 1): STATES[("a", 1)]}, read_committed=False, fail_on_data_loss=False
        )
        == []
    )


def test_clamp_start() -> None:
    assert clamp_start("t", 0, 50, 40, True) == 50
    assert clamp_start("t", 0, 30, 40, False) == 40
    with pytest.raises(DataLoss, match="failOnDataLoss=false"):
        clamp_start("t", 0, 30, 40, True)


# --- minPartitions (KafkaOffsetRangeCalculatorSuite) ------------------------------------------------------------------


def r(topic: str, partition: int, start: int, end: int) -> OffsetRange:
    return OffsetRange(topic, partition, start, end)


def test_split_ranges_one_per_partition_without_min_partitions_or_when_enough() -> None:
    ranges = [r("t1", 1, 1, 2), r("t2", 1, 1, 3), r("t3", 1, 5, 5)]
    assert split_ranges(ranges, None) == ranges[:2]
    assert split_ranges(ranges, 2) == ranges[:2]


def test_max_records_per_partition_cuts_ranges_then_min_partitions_applies_to_the_pieces() -> None:
    """maxRecordsPerPartition: each range in ceil(size / max) equal pieces; minPartitions then splits further only
    when it asks for more than that (Spark: about the max of the two counts)."""
    ranges = [r("a", 0, 0, 10), r("a", 1, 5, 7), r("b", 0, 3, 3)]
    assert split_ranges(ranges, None, 4) == [
        r("a", 0, 0, 3), r("a", 0, 3, 6), r("a", 0, 6, 10), r("a", 1, 5, 7),
    ]  # fmt: skip
    assert split_ranges(ranges, 2, 4) == split_ranges(ranges, None, 4)  # 4 pieces already: minPartitions is met
    assert len(split_ranges(ranges, 8, 4)) >= 7
    assert split_ranges(ranges, None, 100) == ranges[:2]
    for n in range(1, 12):
        pieces = split_ranges(ranges, None, n)
        assert all(p.size <= n for p in pieces)
        covered = sorted((p.topic, p.partition, o) for p in pieces for o in range(p.start, p.end))
        assert covered == sorted((x.topic, x.partition, o) for x in ranges for o in range(x.start, x.end))


def test_split_ranges_splits_large_ranges_like_spark() -> None:
    assert split_ranges([r("t1", 1, 1, 5)], 3) == [r("t1", 1, 1, 2), r("t1", 1, 2, 3), r("t1", 1, 3, 5)]
    assert split_ranges([r("t1", 1, 1, 5), r("t2", 1, 1, 5)], 4) == [
        r("t1", 1, 1, 3),
        r("t1", 1, 3, 5),
        r("t2", 1, 1, 3),
        r("t2", 1, 3, 5),
    ]
    # skewed: the small range stays whole, the large one takes the other parts
    assert split_ranges([r("t1", 1, 1, 5), r("t2", 1, 1, 101)], 3) == [
        r("t1", 1, 1, 5),
        r("t2", 1, 1, 51),
        r("t2", 1, 51, 101),
    ]
    # every offset exactly once, whatever the split
    ranges = [r("a", 0, 0, 1000), r("a", 1, 7, 10), r("b", 0, 100, 333)]
    for n in range(1, 40):
        parts = split_ranges(ranges, n)
        for whole in ranges:
            covered = [
                o
                for p in parts
                if (p.topic, p.partition) == (whole.topic, whole.partition)
                for o in range(p.start, p.end)
            ]
            assert covered == list(range(whole.start, whole.end)), (n, whole)


# --- maxOffsetsPerTrigger ---------------------------------------------------------------------------------------------


def test_rate_limit_spreads_the_limit_by_backlog_and_never_starves() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 1000, ("t", 1): 10, ("t", 2): 0}
    assert rate_limit(start, latest, 10) == {("t", 0): 9, ("t", 1): 1, ("t", 2): 0}
    assert rate_limit(start, latest, 10_000) == latest
    # a partition new to the query starts at 0
    assert rate_limit({("t", 0): 1000}, {("t", 0): 1000, ("t", 1): 50}, 20) == {("t", 0): 1000, ("t", 1): 20}
