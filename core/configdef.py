"""How one config key is typed, read, checked and written: Kafka's ConfigDef, for the keys of ``core/config.py``.

A key (:class:`ConfigKey`) is declared as the metadata of the config dataclass field it describes (:func:`key_field`),
so the field's default is the key's default and nothing is written twice; :func:`keys_of` collects them. A broker
spelling of a topic key (:class:`BrokerSynonym`) reads its own type and unit and converts to the topic key's.

Values are read as ``core/config.py``'s docstring says (Kafka's ConfigDef rules), and a bad one is refused with
Kafka's wording, ``Invalid value <value> for configuration <key>: <rule>`` (:func:`invalid_value`).

Threads: everything here is a pure function of immutable values; any thread may call anything.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from dataclasses import dataclass
from typing import Any

from logfs.core.errors import ConfigError
from logfs.core.format.batch import TimestampType
from logfs.core.format.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

# --- units and Kafka's spellings ------------------------------------------------------------------------------------

MS_PER_MINUTE = 60 * 1000
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR

TIMESTAMP_TYPE_NAMES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}
CLEANUP_POLICY_DELETE = "delete"
CLEANUP_POLICY_COMPACT = "compact"
CLEANUP_POLICY_BOTH = "compact,delete"  # the canonical spelling of both, whatever order or repetition was given
CLEANUP_POLICIES = (CLEANUP_POLICY_DELETE, CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_BOTH)
DOUBLE_MAX = 1.7976931348623157e308  # Java's Double.MAX_VALUE: "unthrottled"


class ValueType(enum.Enum):
    """How a key's value is written and read; INT and LONG are Java's 32- and 64-bit integers."""

    INT = "int"
    LONG = "long"
    TIMESTAMP_TYPE = "timestamp type"
    CLEANUP_POLICY = "cleanup policy"
    REPLICA_IDS = "replica ids"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"


_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")  # Java's parseInt/parseLong over ASCII
_JAVA_DOUBLE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[dDfF]?")  # Double.valueOf: decimals
_LIST_SEPARATOR = re.compile(r"\s*,\s*")  # ConfigDef's LIST: COMMA_WITH_WHITESPACE
_INTEGER_BOUNDS = {ValueType.INT: (INT32_MIN, INT32_MAX), ValueType.LONG: (INT64_MIN, INT64_MAX)}


def invalid_value(name: str, text: object, reason: str) -> ConfigError:
    """Kafka's ConfigException wording, so a Kafka user recognises it."""
    return ConfigError(f"Invalid value {text} for configuration {name}: {reason}")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key: Kafka's name, its value type and range, and what it means; its default is the field's default.

    ``attribute`` (the Python name) and ``default`` are filled in from the dataclass field the key describes.
    """

    name: str
    type: ValueType
    doc: str
    minimum: int | float | None = None
    maximum: int | float | None = None
    attribute: str = ""
    default: Any = None
    default_text: str | None = None  # the Default column when the value alone does not say it (replica.ids)

    def parse(self, text: str, *, spelling: str | None = None) -> Any:
        """The value ``text`` stands for; ConfigError naming ``spelling`` (default: this key) when it is bad."""
        name = spelling or self.name
        trimmed = text.strip()
        if self.type in _INTEGER_BOUNDS:
            low, high = _INTEGER_BOUNDS[self.type]
            if not _JAVA_INTEGER.fullmatch(trimmed) or not low <= int(trimmed) <= high:
                raise invalid_value(name, trimmed, f"Not a number of type {self.type.name}")
            value: Any = int(trimmed)
        elif self.type is ValueType.TIMESTAMP_TYPE:
            by_name = {spelt: kind for kind, spelt in TIMESTAMP_TYPE_NAMES.items()}
            if trimmed not in by_name:
                raise invalid_value(name, trimmed, f"String must be one of: {', '.join(by_name)}")
            value = by_name[trimmed]
        elif self.type is ValueType.CLEANUP_POLICY:
            value = _parse_cleanup_policy(name, trimmed)
        elif self.type is ValueType.DOUBLE:
            if not _JAVA_DOUBLE.fullmatch(trimmed) or float(trimmed.rstrip("dDfF")) in (float("inf"), float("-inf")):
                raise invalid_value(name, trimmed, "Not a number of type DOUBLE")
            value = float(trimmed.rstrip("dDfF"))
        elif self.type is ValueType.BOOLEAN:
            if trimmed.lower() not in ("true", "false"):
                raise invalid_value(name, trimmed, "Expected value to be either true or false")
            value = trimmed.lower() == "true"
        elif self.type is ValueType.STRING:
            value = trimmed
        else:
            value = _parse_replica_ids(name, trimmed)
        self.check(value, spelling=name, text=trimmed)
        return value

    def check(self, value: Any, *, spelling: str | None = None, text: str | None = None) -> None:
        """Raise ConfigError unless ``value`` is of this key's type and in its range."""
        name = spelling or self.name
        shown = self.format(value) if text is None else text
        if self.type in _INTEGER_BOUNDS or self.type is ValueType.DOUBLE:
            if self.type is ValueType.DOUBLE:
                number = isinstance(value, (int, float)) and not isinstance(value, bool)
                if not number or not -DOUBLE_MAX <= value <= DOUBLE_MAX:
                    raise invalid_value(name, shown, "Not a number of type DOUBLE")
            else:
                low, high = _INTEGER_BOUNDS[self.type]
                if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                    raise invalid_value(name, shown, f"Not a number of type {self.type.name}")
            if self.minimum is not None and value < self.minimum:
                raise invalid_value(name, shown, f"Value must be at least {self.minimum}")
            if self.maximum is not None and value > self.maximum:
                raise invalid_value(name, shown, f"Value must be no more than {self.maximum}")
        elif self.type is ValueType.TIMESTAMP_TYPE:
            if not isinstance(value, TimestampType):
                raise invalid_value(name, shown, "must be a TimestampType")
        elif self.type is ValueType.CLEANUP_POLICY:
            if value not in CLEANUP_POLICIES:
                raise invalid_value(name, shown, f"must be one of {', '.join(CLEANUP_POLICIES)}")
        elif self.type is ValueType.BOOLEAN:
            if not isinstance(value, bool):
                raise invalid_value(name, shown, "Expected value to be either true or false")
        elif self.type is ValueType.STRING:
            if not isinstance(value, str):
                raise invalid_value(name, shown, "must be a string")
        elif not isinstance(value, tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= INT32_MAX for i in value
        ):
            raise invalid_value(name, shown, "must be a tuple of replica ids, each an int of at least 0")

    def format(self, value: Any) -> str:
        """``value`` as it is written in a config file; :meth:`parse` reads it back."""
        if self.type is ValueType.TIMESTAMP_TYPE:
            return TIMESTAMP_TYPE_NAMES[value]
        if self.type is ValueType.REPLICA_IDS:
            return ",".join(str(i) for i in value)
        if self.type is ValueType.DOUBLE:
            return repr(float(value)).replace("e+", "E").replace("e-", "E-")  # Java's Double.toString spelling
        if self.type is ValueType.BOOLEAN:
            return "true" if value else "false"
        return str(value)

    def valid_values(self) -> str:
        """The Valid values column of the docs table."""
        if self.type is ValueType.TIMESTAMP_TYPE:
            return ", ".join(f"`{name}`" for name in TIMESTAMP_TYPE_NAMES.values())
        if self.type is ValueType.CLEANUP_POLICY:
            return f"`{CLEANUP_POLICY_DELETE}`, `{CLEANUP_POLICY_COMPACT}`, `{CLEANUP_POLICY_BOTH}` (either order)"
        if self.type is ValueType.BOOLEAN:
            return "`true`, `false`"
        if self.type is ValueType.REPLICA_IDS:
            return "comma-separated ints, at least 0, node.id among them"
        if self.minimum is not None and self.maximum is not None:
            return f"{self.type.value}, {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f"{self.type.value}, at least {self.minimum}"
        return self.type.value


def _parse_cleanup_policy(name: str, text: str) -> str:
    """Kafka's list of compact and delete (either order, repeats allowed), kept in one canonical spelling."""
    policies = _LIST_SEPARATOR.split(text) if text else []
    for policy in policies:
        if policy not in (CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE):
            raise invalid_value(name, text, f"String must be one of: {CLEANUP_POLICY_COMPACT}, {CLEANUP_POLICY_DELETE}")
    if not policies:
        raise invalid_value(name, text, "logfs needs at least one of compact, delete")
    if CLEANUP_POLICY_COMPACT in policies:
        return CLEANUP_POLICY_BOTH if CLEANUP_POLICY_DELETE in policies else CLEANUP_POLICY_COMPACT
    return CLEANUP_POLICY_DELETE


def _parse_replica_ids(name: str, text: str) -> tuple[int, ...]:
    ids: list[int] = []
    for item in _LIST_SEPARATOR.split(text):
        if not _JAVA_INTEGER.fullmatch(item) or not 0 <= int(item) <= INT32_MAX:
            raise invalid_value(name, text, f"{item!r} is not a replica id (an int of at least 0)")
        if int(item) in ids:
            raise invalid_value(name, text, f"replica id {int(item)} is listed twice")
        ids.append(int(item))
    return tuple(ids)


def key_field(name: str, type: ValueType, doc: str, **rules: Any) -> dict[str, ConfigKey]:
    """The metadata of a config field: its :class:`ConfigKey` (the field's default is the key's default)."""
    return {"key": ConfigKey(name, type, doc, **rules)}


def keys_of(cls: type) -> dict[str, ConfigKey]:
    """The ConfigKeys of a config dataclass by Kafka name, each completed with its attribute and default."""
    keys = {}
    for f in dataclasses.fields(cls):
        if "key" in f.metadata:
            keys[f.metadata["key"].name] = dataclasses.replace(f.metadata["key"], attribute=f.name, default=f.default)
    return keys


@dataclass(frozen=True, slots=True)
class BrokerSynonym:
    """A broker spelling of a topic key (Kafka's ConfigSynonym), read as ``type`` and scaled to the topic's unit.

    ``minimum`` is the broker key's own range, checked before scaling; the scaled value must then pass the topic
    key's. ``retention_time`` applies KafkaConfig's rules for the broker's retention time: any negative value is -1
    (unlimited, ``logRetentionTimeMillis``) and 0 is refused (``validateValues``), though a topic may set
    ``retention.ms=0``.
    """

    name: str
    topic_key: str
    type: ValueType | None = None  # None: the topic key's own type
    unit_ms: int = 1
    minimum: int | None = None
    retention_time: bool = False

    def parse(self, text: str, topic: ConfigKey) -> Any:
        """The value of ``topic`` (the key this one spells, ``LOG_KEYS[topic_key]``) that ``text`` stands for;
        ConfigError naming this spelling when it is bad."""
        if self.type is None and self.unit_ms == 1 and not self.retention_time:
            return topic.parse(text, spelling=self.name)
        own = ConfigKey(self.name, self.type or topic.type, "", minimum=self.minimum)
        value = own.parse(text) * self.unit_ms
        if self.retention_time and value < 0:
            value = -1
        if self.retention_time and value == 0:
            raise invalid_value(self.name, text.strip(), "must be unlimited (-1) or at least 1 ms")
        try:
            topic.check(value, spelling=self.name, text=text.strip())
        except ConfigError as exc:
            raise ConfigError(f"{exc} (as {self.topic_key}={value})") from exc
        return value

    def conversion(self) -> str:
        """The Conversion column of the docs table."""
        parts = []
        if self.unit_ms == MS_PER_HOUR:
            parts.append("hours to ms")
        elif self.unit_ms == MS_PER_MINUTE:
            parts.append("minutes to ms")
        if self.type is not None:
            parts.append(self.type.value + (f", at least {self.minimum}" if self.minimum is not None else ""))
        if self.retention_time:
            parts.append("negative: -1; 0 refused")
        return "; ".join(parts)
