"""Kafka's partitioner (``core/format/partitioner.py``): murmur2 against Kafka's own vectors and kafka-python."""

from __future__ import annotations

import random

from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from logfs.core.format.partitioner import murmur2, partition_for_key, to_positive


def test_murmur2_matches_kafkas_vectors_and_kafka_python() -> None:
    # org.apache.kafka.common.utils.UtilsTest.testMurmur2
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, expected in vectors.items():
        assert murmur2(key) == expected
    rng = random.Random(3)
    print("seed 3")
    for _ in range(2000):
        key = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        assert to_positive(murmur2(key)) == kafka_python_murmur2(key) & 0x7FFFFFFF
        assert partition_for_key(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7
