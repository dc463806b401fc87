"""The cluster's pure rules (logfs/cluster/rules.py): Kafka's znode JSON, the election, the ISR it leaves, epochs that
only grow, and a node's reaction to the leadership ZooKeeper records. No ZooKeeper, no mount."""

from __future__ import annotations

import json

import pytest

from logfs.cluster.rules import (
    NO_LEADER,
    NO_LEADERSHIP,
    Action,
    BadZnode,
    Broker,
    Election,
    Leadership,
    PartitionState,
    controller_data,
    controller_id,
    dead_removed,
    decide,
    decode_assignment,
    elect,
    encode_assignment,
    in_standing,
    isr_after_election,
    needs_election,
    next_leader_epoch,
)
from logfs.cluster.znodes import split_connect, state_path

# --- znode JSON ---------------------------------------------------------------------------------------------------


def test_partition_state_is_kafkas_json_and_round_trips() -> None:
    state = PartitionState(leader=2, leader_epoch=7, isr=(2, 3), controller_epoch=3)
    doc = json.loads(state.encode())
    assert doc == {"controller_epoch": 3, "leader": 2, "version": 1, "leader_epoch": 7, "isr": [2, 3]}
    assert PartitionState.decode(state.encode()) == state
    # Kafka's own example from the reference, field order as Kafka writes it
    kafka = b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":7,"isr":[2,3]}'
    assert PartitionState.decode(kafka) == state


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b"[1]", b'{"leader":1,"leader_epoch":0,"controller_epoch":1}',
     b'{"leader":"1","leader_epoch":0,"isr":[1],"controller_epoch":1}',
     b'{"leader":1,"leader_epoch":true,"isr":[1],"controller_epoch":1}',
     b'{"leader":1,"leader_epoch":0,"isr":["1"],"controller_epoch":1}'],
)  # fmt: skip
def test_a_bad_partition_state_is_refused(data: bytes) -> None:
    with pytest.raises(BadZnode):
        PartitionState.decode(data)


def test_topic_assignment_is_kafkas_version_3_json_and_round_trips() -> None:
    assignment = {1: (2, 3, 1), 0: (1, 2, 3), 10: (3, 1, 2)}
    doc = json.loads(encode_assignment(assignment))
    # the reference's example shape: partitions by number as strings, lists in assignment order, nothing moving
    assert doc == {"version": 3, "partitions": {"0": [1, 2, 3], "1": [2, 3, 1], "10": [3, 1, 2]},
                   "adding_replicas": {}, "removing_replicas": {}}  # fmt: skip
    assert decode_assignment(encode_assignment(assignment)) == assignment
    # Kafka's own example, and what Kafka 2.3 (version 1) and 2.4 (version 2, with a topic id in 2.8) wrote
    assert decode_assignment(b'{"version":3,"partitions":{"0":[1,2,3]},"adding_replicas":{},"removing_replicas":{}}'
                             ) == {0: (1, 2, 3)}  # fmt: skip
    assert decode_assignment(b'{"version":1,"partitions":{"1":[2],"0":[1]}}') == {0: (1,), 1: (2,)}
    assert decode_assignment(b'{"version":2,"topic_id":"x","partitions":{"0":[3,1]}}') == {0: (3, 1)}
    assert decode_assignment(b"") is None  # a topic recorded by an earlier logfs: no assignment yet


@pytest.mark.parametrize("data", [
    b"[]", b"{", b'{"version":3}', b'{"partitions":[]}', b'{"partitions":{"x":[1]}}', b'{"partitions":{"-1":[1]}}',
    b'{"partitions":{"0":[]}}', b'{"partitions":{"0":[1,1]}}', b'{"partitions":{"0":["1"]}}',
    b'{"partitions":{"0":[true]}}', b'{"partitions":{"0":1}}',
])  # fmt: skip
def test_a_bad_topic_assignment_is_refused(data: bytes) -> None:
    with pytest.raises(BadZnode):
        decode_assignment(data)


def test_controller_znode_is_kafkas_version_1() -> None:
    doc = json.loads(controller_data(4, now_ms=1234))
    assert doc == {"version": 1, "brokerid": 4, "timestamp": "1234"}
    assert controller_id(controller_data(4)) == 4
    with pytest.raises(BadZnode):
        controller_id(b'{"version":1}')


def test_broker_and_leadership_round_trip() -> None:
    broker = Broker(3, "/mnt/node3", 5)
    doc = json.loads(broker.encode(now_ms=10))
    assert doc["advertised.mount"] == "/mnt/node3" and doc["version"] == 5 and doc["timestamp"] == "10"
    assert Broker.decode(3, broker.encode()) == broker
    leadership = Leadership(2, 9, "/mnt/node2", 4, broker_epoch=77)
    assert Leadership.decode(leadership.encode()) == leadership
    assert leadership.leader_file() == {"node_id": 2, "mount": "/mnt/node2", "leader_epoch": 9}
    assert NO_LEADERSHIP.leader_file() == {"node_id": -1, "mount": "", "leader_epoch": -1}
    with pytest.raises(BadZnode):
        Leadership.decode(b'{"leader":1,"leader_epoch":1,"controller_epoch":1,"broker_epoch":1}')  # no mount
    # the live nodes' broker epochs the controller saw (a leadership of an earlier logfs has none)
    seen = Leadership(2, 9, "/mnt/node2", 4, broker_epoch=77, brokers=((1, 70), (2, 77), (3, 81)))
    assert json.loads(seen.encode())["brokers"] == {"1": 70, "2": 77, "3": 81}
    assert Leadership.decode(seen.encode()) == seen
    old = b'{"version":1,"leader":1,"leader_epoch":1,"mount":"/m","controller_epoch":1,"broker_epoch":1}'
    assert Leadership.decode(old).brokers == ()
    for bad in (b'"brokers":[1]', b'"brokers":{"x":1}', b'"brokers":{"1":"2"}'):
        with pytest.raises(BadZnode):
            Leadership.decode(old[:-1] + b"," + bad + b"}")


def test_a_node_registered_again_since_the_leadership_is_not_in_good_standing() -> None:
    """Kafka's bounced broker (CIT testControllerDetectsBouncedBrokers): node 2 restarted between two looks."""
    assert in_standing({1: 10, 2: 21, 3: 30}, ((1, 10), (2, 20), (3, 30))) == {1: 10, 3: 30}
    assert in_standing({1: 10, 4: 40}, ((1, 10), (2, 20))) == {1: 10, 4: 40}  # 4 is new; 2 is gone
    assert in_standing({1: 10, 2: 21}, ()) == {1: 10, 2: 21}  # nothing recorded (an earlier logfs): all stand


def test_connect_string_chroot_and_state_paths() -> None:
    assert split_connect("127.0.0.1:2181") == ("127.0.0.1:2181", "")
    assert split_connect("a:1,b:2/logfs/one/") == ("a:1,b:2", "/logfs/one")
    assert split_connect("a:1/") == ("a:1", "")
    assert state_path("orders", 3) == "/brokers/topics/orders/partitions/3/state"


# --- the election -------------------------------------------------------------------------------------------------


def test_election_picks_the_first_live_node_in_replica_order_that_is_in_every_isr() -> None:
    assert elect([1, 2, 3], {2, 3}, [(1, 2, 3), (2, 3)]) == Election(2, True)
    assert elect([3, 2, 1], {1, 2, 3}, [(1, 2, 3)]) == Election(3, True)  # replica.ids order, not id order
    # node 2 is live but missing from one partition's ISR: node 3 is the only one in every ISR
    assert elect([1, 2, 3], {2, 3}, [(2, 3), (1, 3)]) == Election(3, True)


def test_election_with_no_partitions_picks_the_first_live_node() -> None:
    assert elect([1, 2, 3], {3, 2}, []) == Election(2, True)
    assert elect([1, 2, 3], set(), []) == Election(NO_LEADER, True)


def test_no_live_isr_member_means_no_leader_unless_unclean() -> None:
    assert elect([1, 2, 3], {2, 3}, [(1,)]) == Election(NO_LEADER, True)
    assert elect([1, 2, 3], {3, 2}, [(1,)], unclean=True) == Election(2, False)
    assert elect([1, 2, 3], set(), [(1,)], unclean=True) == Election(NO_LEADER, True)


def test_the_isr_an_election_leaves() -> None:
    live = {2, 3}
    assert isr_after_election((1, 2, 3), Election(2, True), live) == (2, 3)  # dead members leave, order kept
    assert isr_after_election((1, 3), Election(2, True), live) == (2, 3)  # the leader is always in it
    assert isr_after_election((1,), Election(3, False), live) == (3,)  # unclean: the new leader alone
    assert isr_after_election((1,), Election(NO_LEADER, True), live) == (1,)  # kept for the last member's return


def test_dead_replicas_leave_the_isr_but_never_the_last_member() -> None:
    assert dead_removed((1, 2, 3), {1: 10, 3: 30}) == (1, 3)
    assert dead_removed((1, 2), {1: 10}) == (1,)
    assert dead_removed((2,), {1: 10}) == (2,)  # the last member stays, so only it can lead cleanly
    assert dead_removed((2, 3), {1: 10}) == (2, 3)  # nobody of it live: kept (the election decides)
    assert dead_removed((1, 2, 3), {1: 1, 2: 2, 3: 3}) == (1, 2, 3)


def test_epochs_only_grow() -> None:
    assert next_leader_epoch([], []) == 0  # a fresh cluster leads in epoch 0, as a fresh store does
    assert next_leader_epoch([3, 5, -1], [2]) == 6
    assert next_leader_epoch([3], [9]) == 10  # a node's store saw a later epoch than ZooKeeper records


def test_election_is_needed_only_when_the_leader_is_gone_or_restarted() -> None:
    led = Leadership(1, 4, "/m1", 1, broker_epoch=100)
    assert not needs_election(led, {1: 100, 2: 200}, [1, 2])
    assert needs_election(led, {2: 200}, [1, 2])  # the leader's registration is gone
    assert needs_election(led, {1: 300, 2: 200}, [1, 2])  # it registered again: it restarted
    assert needs_election(NO_LEADERSHIP, {2: 200}, [1, 2])
    assert not needs_election(NO_LEADERSHIP, {}, [1, 2])
    assert not needs_election(NO_LEADERSHIP, {9: 1}, [1, 2])  # a node outside replica.ids changes nothing


# --- a node's reaction ----------------------------------------------------------------------------------------------


def test_a_node_acts_only_on_newer_epochs() -> None:
    seen = Leadership(1, 5, "/m1", 1, broker_epoch=10)
    assert decide(1, 10, False, 4, seen) is Action.LEAD
    assert decide(1, 10, True, 4, seen) is Action.ADOPT  # a newer epoch naming the leader itself: silently
    assert decide(2, 20, False, 4, seen) is Action.FOLLOW
    assert decide(2, 20, True, 4, seen) is Action.FOLLOW  # a leader that reads it is fenced
    assert decide(2, 20, False, 5, seen) is Action.IGNORE  # not newer
    assert decide(2, 20, False, 6, seen) is Action.IGNORE  # older: epochs never go back
    assert decide(1, 11, False, 4, seen) is Action.IGNORE  # names an earlier registration: wait for an election
    assert decide(2, 20, True, 4, Leadership(NO_LEADER, 5, "", 1)) is Action.FOLLOW  # nobody leads


def test_only_the_zookeeper_module_imports_kazoo() -> None:
    """kazoo runs its own threads: it is confined to logfs/cluster/zksession.py, whose callbacks only hand words to
    trio and whose answers are logfs's types (logfs/cluster/zkerrors.py)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    pattern = re.compile(r"^\s*(import kazoo|from kazoo)", re.M)
    importers = sorted(
        str(path.relative_to(root))
        for folder in ("logfs", "core", "mount")
        for path in (root / folder).rglob("*.py")
        if pattern.search(path.read_text())
    )
    assert importers == ["logfs/cluster/zksession.py"]
