"""The rule that splits providers between daemons sharing one database (docs/daemon.md)."""

from __future__ import annotations

from collections import Counter

import pytest

from orchestrator.daemon.share import deal, dealt

FOUR = ["p1", "p2", "p3", "p4"]


def shares(by_member: dict[str, list[str]]) -> dict[str, set[str]]:
    return {member: dealt(by_member, member) for member in by_member}


@pytest.mark.parametrize(
    ("providers", "members", "sizes"),
    [(4, 2, [2, 2]), (5, 2, [3, 2]), (1, 3, [1, 0, 0]), (7, 3, [3, 2, 2]), (3, 3, [1, 1, 1])],
)
def test_members_configured_alike_each_get_floor_or_ceiling(providers: int, members: int, sizes: list[int]) -> None:
    names = [f"p{i}" for i in range(providers)]
    by_member = {f"m{j}": names for j in range(members)}
    split = shares(by_member)
    # Every provider to exactly one member; the lower instance ids take the extra ones.
    assert Counter(p for got in split.values() for p in got) == Counter(names)
    assert [len(split[f"m{j}"]) for j in range(members)] == sizes


def test_four_over_two_is_dealt_round_robin_in_sorted_order() -> None:
    # The instance ids' order, not the mapping's, decides the ranks.
    assert shares({"b": FOUR, "a": FOUR}) == {"a": {"p1", "p3"}, "b": {"p2", "p4"}}


def test_a_provider_only_one_member_configures_is_its_own() -> None:
    by_member = {"a": [*FOUR, "only-a"], "b": [*FOUR, "only-b1", "only-b2"]}
    assert shares(by_member) == {"a": {"p1", "p3", "only-a"}, "b": {"p2", "p4", "only-b1", "only-b2"}}


def test_a_provider_some_members_configure_is_dealt_among_them() -> None:
    by_member = {"a": ["x", "y", "z"], "b": ["x", "y", "z", "w1", "w2"], "c": ["x", "y", "z", "w1", "w2"]}
    # x, y, z over a, b, c; w1, w2 over b and c only: a never gets a provider it is not configured for.
    assert deal(by_member) == {"x": "a", "y": "b", "z": "c", "w1": "b", "w2": "c"}


def test_a_member_that_is_not_live_gets_nothing() -> None:
    assert dealt({"a": FOUR}, "b") == set()
    assert dealt({}, "a") == set()


def test_a_member_joining_last_takes_from_the_end_of_the_deal() -> None:
    two = deal({"a": FOUR, "b": FOUR})
    three = deal({"a": FOUR, "b": FOUR, "c": FOUR})
    moved = {p for p in FOUR if two[p] != three[p]}
    # c needs one (⌊4/3⌋); the rank rule moves two: p3 a → c, p4 b → a. Leaving gives them back.
    assert moved == {"p3", "p4"}
    assert (three["p3"], three["p4"]) == ("c", "a")
    assert deal({"a": FOUR, "b": FOUR}) == two


def test_a_member_joining_first_shifts_every_rank_after_it() -> None:
    two = deal({"b": FOUR, "c": FOUR})
    three = deal({"a": FOUR, "b": FOUR, "c": FOUR})
    # What the rule costs (docs/daemon.md): a lower instance id moves every provider of the group.
    assert {p for p in FOUR if two[p] != three[p]} == set(FOUR)


def test_a_member_leaving_hands_its_providers_to_the_survivors() -> None:
    three = deal({"a": FOUR, "b": FOUR, "c": FOUR})
    assert dealt({"a": FOUR, "b": FOUR, "c": FOUR}, "c") == {"p3"}
    survivors = deal({"a": FOUR, "b": FOUR})
    assert set(survivors.values()) == {"a", "b"}
    # p3 (c's) and p4 (re-ranked) move; p1 and p2 stay where they were.
    assert {p for p in FOUR if three[p] != survivors[p]} == {"p3", "p4"}


def test_a_provider_configured_twice_by_one_member_counts_once() -> None:
    assert shares({"a": ["p1", "p1", "p2"], "b": ["p1", "p2"]}) == {"a": {"p1"}, "b": {"p2"}}
