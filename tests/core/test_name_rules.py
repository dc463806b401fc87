"""The one name rule (core/names.py) for topics, group ids and transactional ids, and Kafka's ``.``/``_`` collisions
(core/topicnames.py) in the store: every byte value, the length boundaries, the dot names, the error types the mount
maps to EINVAL and ENAMETOOLONG, and which creations a collision refuses (new ones) and which it does not (a
follower's copies, a store that already holds both)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from logfs.core.configtext import parse_store_config
from logfs.core.errors import (
    GroupIdTooLong,
    InvalidGroupId,
    InvalidTopic,
    InvalidTransactionalId,
    LogfsError,
    TopicExists,
    TopicNameTooLong,
    TransactionalIdTooLong,
)
from logfs.core.names import is_group_id, validate_group_id, validate_transactional_id
from logfs.core.store import NewTopic, Store
from logfs.core.topicnames import TopicCollisions, parse_partition_dir, unify_collision_chars, validate_topic_name

# (validator, its invalid error, its too-long error): the three kinds of name that share the rule.
KINDS: list[tuple[Callable[[str], None], type[LogfsError], type[LogfsError]]] = [
    (validate_topic_name, InvalidTopic, TopicNameTooLong),
    (validate_group_id, InvalidGroupId, GroupIdTooLong),
    (validate_transactional_id, InvalidTransactionalId, TransactionalIdTooLong),
]
LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def refusal(validate: Callable[[str], None], name: str) -> type[LogfsError] | None:
    try:
        validate(name)
    except LogfsError as exc:
        return type(exc)
    return None


@pytest.mark.parametrize(("validate", "invalid", "too_long"), KINDS)
def test_every_character_alone_and_inside_a_name_passes_only_if_kafka_allows_it(
    validate: Callable[[str], None], invalid: type[LogfsError], too_long: type[LogfsError]
) -> None:
    for code in range(0x300):  # every byte value as a character, and the first blocks beyond Latin-1
        ch = chr(code)
        legal = ch in LEGAL
        alone = None if legal and ch != "." else invalid  # "." is refused alone; "-", "_" … are names
        assert refusal(validate, ch) is alone, repr(ch)
        assert refusal(validate, f"a{ch}b") is (None if legal else invalid), repr(ch)
        assert refusal(validate, f"ab{ch}") is (None if legal else invalid), repr(ch)
    for ch in ("\udcff", "\u2028", "\uff0e", "\U0001f600", "é"):  # surrogate escape, line separator, wide dot
        assert refusal(validate, f"a{ch}") is invalid, repr(ch)


@pytest.mark.parametrize(("validate", "invalid", "too_long"), KINDS)
def test_lengths_dot_names_and_the_leading_dot(
    validate: Callable[[str], None], invalid: type[LogfsError], too_long: type[LogfsError]
) -> None:
    assert refusal(validate, "") is invalid
    assert refusal(validate, "x" * 249) is None
    for n in (250, 255, 256, 1000):
        assert refusal(validate, "x" * n) is too_long, n
        assert issubclass(too_long, invalid)  # a too-long name is an invalid one: callers may catch either
    assert refusal(validate, "é" * 250) is too_long  # length is told first, whatever the characters
    for name in (".", "..", "...", ".hidden", "./x", "../x", "a/b", "a\0b", "a b", "a\nb"):
        assert refusal(validate, name) is invalid, name
    for name in ("-", "_", "a..b", "a.", "_x", "-x", "x-0", "A.b_c-9"):
        assert refusal(validate, name) is None, name


def test_messages_say_which_rule_and_which_kind() -> None:
    cases = [
        (lambda: validate_topic_name("my topic"), "topic name 'my topic' has characters outside [A-Za-z0-9._-]"),
        (lambda: validate_topic_name("a" * 250), "topic name of 250 characters exceeds 249"),
        (lambda: validate_topic_name(".."), "topic name '..' is not allowed"),
        (lambda: validate_group_id(".g"), "group id '.g' starts with '.', which logfs reserves"),
        (lambda: validate_group_id(""), "a group id cannot be empty"),
        (lambda: validate_transactional_id("t\x01"), r"transactional id 't\x01' has characters outside [A-Za-z0-9._-]"),
    ]
    for call, message in cases:
        with pytest.raises(LogfsError, match=re.escape(message) + "$"):
            call()
    assert is_group_id("reporting") and not is_group_id("a b") and not is_group_id("g" * 250)


def test_a_partition_directory_name_parses_only_for_a_legal_topic() -> None:
    assert parse_partition_dir("a.b_c-0") == ("a.b_c", 0)
    for name in ("..-0", ".x-0", "a b-0", "x" * 250 + "-0", "-0", "x-01", "x-"):
        assert parse_partition_dir(name) is None, name


def test_the_collision_index_unifies_dots_and_underscores() -> None:
    assert unify_collision_chars("a.b_c.") == "a_b_c_"
    index = TopicCollisions()
    for topic in ("a.b", "plain", "x_y", "x.y.z"):
        index.add(topic)
    assert index.colliding("a_b") == ["a.b"]
    assert index.colliding("a.b") == []  # itself is no collision
    assert index.colliding("x.y") == ["x_y"]
    assert index.colliding("x_y_z") == ["x.y.z"]
    assert index.colliding("ab") == [] and index.colliding("plain") == []
    index.add("a_b")
    assert index.colliding("a.b") == ["a_b"] and index.colliding("a_b") == ["a.b"]
    index.remove("a.b")
    index.remove("a_b")
    index.remove("never-added")
    assert index.colliding("a.b") == []


def open_store(path: Path) -> Store:
    return Store.open(path, parse_store_config(["num.partitions=1"]))


@pytest.mark.parametrize(("existing", "new"), [("a_b", "a.b"), ("a.b", "a_b"), ("x.y_z", "x_y.z"), ("q..", "q__")])
def test_a_new_topic_that_collides_with_an_existing_one_is_refused_naming_it(
    tmp_path: Path, existing: str, new: str
) -> None:
    with open_store(tmp_path) as store:
        store.create_topic(existing)
        with pytest.raises(InvalidTopic, match=f"collides with existing topic '{re.escape(existing)}'"):
            store.create_topic(new)
        assert store.topics() == [existing]
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [f"{existing}-0"]
        with pytest.raises(TopicExists):
            store.create_topic(existing)  # the same name is "exists", as Kafka checks first
        store.delete_topic(existing)
        store.create_topic(new)  # the index forgot the deleted topic
        assert store.topics() == [new]


def test_two_new_topics_that_collide_create_nothing(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        with pytest.raises(InvalidTopic, match="collides with topic created with it 'c_d'"):
            store.create_topics([NewTopic("ok"), NewTopic("c_d"), NewTopic("c.d")])
        assert store.topics() == []


def test_a_follower_copies_colliding_topics_and_a_store_holding_both_loads(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.create_topic("m.n")
        store.create_topics([NewTopic("m_n")], copied=True)  # a leader's, copied as it is
        store.create_topics([NewTopic("p.q"), NewTopic("p_q")], copied=True)
        assert store.topics() == ["m.n", "m_n", "p.q", "p_q"]
    with open_store(tmp_path) as store:  # a store that already holds both loads them both
        assert store.topics() == ["m.n", "m_n", "p.q", "p_q"]
        assert store.log("m_n", 0).log_end_offset == 0
        with pytest.raises(TopicExists):
            store.create_topic("m.n")


def test_a_third_spelling_is_refused_naming_both_existing_topics(tmp_path: Path) -> None:
    with open_store(tmp_path) as store:
        store.create_topics([NewTopic("r.s.t"), NewTopic("r_s_t")], copied=True)
        with pytest.raises(InvalidTopic, match=re.escape("collides with existing topic 'r.s.t', 'r_s_t'")):
            store.create_topic("r.s_t")
        store.delete_topic("r.s.t")
        with pytest.raises(InvalidTopic, match=re.escape("collides with existing topic 'r_s_t':")):
            store.create_topic("r.s_t")
