"""What a follower takes of a shared leader's owners (logfs/follower/discovery.py ``plan_owners``, and the
rotating slices of logfs/follower/discoveryloop.py), on a real store: the root's owner, every claimed group's,
and the forgetting of group owners the leader no longer shows as claimed, those recorded before this process
started included; and the slices that revisit every known name within DISCOVER_FULL_ROUNDS rounds, while names
come and go."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from logfs.core.owners import Owner, Owners, default_owner
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.follower import discoveryloop
from logfs.follower.discovery import plan_owners
from logfs.follower.discoveryloop import DISCOVER_FULL_ROUNDS, DiscoveryLoop

ALICE = Owner(1000, 1000, 0o750)
ROOT_1777 = Owner(0, 0, 0o1777)


def apply(store: Store, root: Owner, groups: dict[str, Owner | None] | None) -> tuple[dict[str, Owner], list[str]]:
    changed, gone = plan_owners(store, root, groups)
    for name, owner in changed.items():
        store.owners.set(name, owner)
    store.owners.forget_all(gone)
    return changed, gone


def test_claims_are_taken_and_what_the_leader_no_longer_claims_is_forgotten(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", StoreConfig()) as store:
        changed, gone = apply(store, ROOT_1777, {"a": ALICE, "b": None, "c": default_owner()})
        assert changed == {Owners.root_file(): ROOT_1777, Owners.group_file("a"): ALICE,
                           Owners.group_file("c"): default_owner()}  # fmt: skip
        assert gone == []  # a claim equal to this process's default is still a claim: recorded
        assert apply(store, ROOT_1777, {"a": ALICE, "b": None, "c": default_owner()}) == ({}, [])
        # the leader's listing failed this round: the groups stay as they are
        assert apply(store, ROOT_1777, None) == ({}, [])
        assert store.owners.get(Owners.group_file("a")) == ALICE
        # a deleted there, c unclaimed again: both forgotten, b claimed now
        changed, gone = apply(store, ROOT_1777, {"b": ALICE, "c": None})
        assert changed == {Owners.group_file("b"): ALICE}
        assert gone == sorted([Owners.group_file("a"), Owners.group_file("c")])
        assert not (tmp_path / "s" / Owners.group_file("a")).exists()
    # a claim recorded by an earlier run, of a group deleted on the leader while this follower was down
    with Store.open(tmp_path / "s", StoreConfig()) as store:
        assert store.owners.get(Owners.group_file("b")) == ALICE
        assert apply(store, ROOT_1777, {}) == ({}, [Owners.group_file("b")])


def test_slices_revisit_every_name_within_the_full_rounds_while_names_come_and_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(discoveryloop, "DISCOVER_SLICE_MIN", 1)
    loop = DiscoveryLoop(None)  # type: ignore[arg-type]  # only its slices are used here
    rng = random.Random(27)
    names = {f"g{i:03d}" for i in range(40)}
    steady = set(sorted(names)[::3])  # never removed
    last_seen = {name: 0 for name in names}
    for round_ in range(1, 200):
        if round_ % 2:  # churn: names come and go between rounds
            names -= {rng.choice(sorted(names - steady))}
            names |= {f"n{round_:03d}"}
            last_seen.setdefault(f"n{round_:03d}", round_)
        for name in loop._rotating("groups", sorted(names)):
            last_seen[name] = round_
        assert all(round_ - last_seen[name] < DISCOVER_FULL_ROUNDS for name in steady), round_  # seen in the last 10
