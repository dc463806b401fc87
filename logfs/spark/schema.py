"""The Spark schemas of the ``logfs`` format: the columns a read gives (Spark's Kafka source's, exactly), the columns a
write takes, and the ``.jsonl`` rendering's schema for ``spark.read.json`` (docs/spark.md, "Plain files",
"The `logfs` data source" and "The `logfs` sink").

Threads: pure values and checks; the driver checks a query's schema, executors build :func:`kafka_struct` (they have
no SparkContext to parse the DDL strings).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from logfs.spark.options import OptionError

# The columns of Spark's Kafka source, names and types exactly (KafkaRecordToRowConverter).
KAFKA_SCHEMA = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, timestampType INT"
)
HEADERS_COLUMN = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
HEADER_STRUCT = StructType([StructField("key", StringType()), StructField("value", BinaryType())])

# The `.jsonl` rendering (docs/spark.md, "Plain files") as a Spark DDL schema, for spark.read.json(…,
# schema=JSONL_SCHEMA) over `hw/` files without schema inference. `timestamp` is epoch milliseconds (timestamp_millis()
# converts it); `key`, `value` and header values are text, or base64 when their `…Encoding` field says "base64".
JSONL_SCHEMA = (
    "topic STRING, `partition` INT, `offset` BIGINT, `timestamp` BIGINT, timestampType INT, "
    "key STRING, keyEncoding STRING, value STRING, valueEncoding STRING, "
    "headers ARRAY<STRUCT<key: STRING, value: STRING, valueEncoding: STRING>>"
)


def check_read_schema(schema: StructType, include_headers: bool) -> None:
    """OptionError unless ``schema`` is the source's fixed schema (with headers when ``include_headers``)."""
    want = kafka_struct(include_headers)
    if [(f.name, f.dataType) for f in schema.fields] != [(f.name, f.dataType) for f in want.fields]:
        raise OptionError(f"the logfs source has a fixed schema ({want.simpleString()}); got {schema.simpleString()}")


def kafka_struct(include_headers: bool) -> StructType:
    """KAFKA_SCHEMA (and HEADERS_COLUMN) as a StructType, built without a SparkContext (workers have none)."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_STRUCT)))
    return StructType(fields)


def check_write_schema(schema: StructType, *, topic_option: bool) -> None:
    """OptionError unless the DataFrame's columns are ones the sink takes: a value (binary or string), optional key,
    topic (unless ``topic_option``: the topic option is set), partition and headers, each of Kafka's sink's type."""
    types: dict[str, DataType] = {f.name: f.dataType for f in schema.fields}
    text_or_binary = (StringType(), BinaryType())
    if "value" not in types:
        raise OptionError("the logfs sink needs a value column (binary or string)")
    for name in ("key", "value"):
        if name in types and types[name] not in text_or_binary:
            raise OptionError(f"column {name} must be binary or string, not {types[name].simpleString()}")
    if not topic_option and "topic" not in types:
        raise OptionError("the logfs sink needs a topic: the topic option or a topic column")
    if "topic" in types and types["topic"] != StringType():
        raise OptionError(f"column topic must be a string, not {types['topic'].simpleString()}")
    if "partition" in types and types["partition"] != IntegerType():
        raise OptionError(f"column partition must be an int, not {types['partition'].simpleString()}")
    if "headers" in types:
        h = types["headers"]
        if not (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)) or [
            (f.name, f.dataType) for f in h.elementType.fields
        ] != [(f.name, f.dataType) for f in HEADER_STRUCT.fields]:
            raise OptionError(
                f"column headers must be array<struct<key: string, value: binary>>, not {h.simpleString()}"
            )
