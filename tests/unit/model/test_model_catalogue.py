"""The flavor catalogue as values: a catalogue root's output read as untrusted input, and what a
template's ``select:`` picks from it (docs/configuration.md, "Selecting flavors from the catalogue")."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from orchestrator.configfile import parse_config
from orchestrator.model.catalogue import (
    CatalogueError,
    Flavor,
    flavors_of,
    resolve_selected,
    resolve_selections,
    select_offerings,
)
from orchestrator.model.templateconfig import FlavorSelection

CATALOGUE = [
    Flavor("c2", 2, 4.0, 0, 0.08, ("a", "b", "c")),
    Flavor("c4", 4, 16.0, 0, 0.16, ("a", "b")),
    Flavor("c8", 8, 32.0, 0, 0.24, ("b", "c")),
    Flavor("m8", 8, 64.0, 0, 0.48, ("a",)),
    Flavor("g4", 32, 256.0, 4, 3.0, ("a", "b")),
    Flavor("noprice", 16, 64.0, 0, None, ("a",)),
]


def _select(**doc: Any) -> FlavorSelection:
    return FlavorSelection.model_validate(doc)


def _names(offerings: list[Any]) -> list[str]:
    return [o.name for o in offerings]


def test_ranges_are_inclusive_on_every_attribute() -> None:
    picked = select_offerings(_select(cpus={"min": 4, "max": 8}, memory_gb={"max": 32}), CATALOGUE, 1)
    assert sorted(_names(picked)) == ["c4", "c8"]
    assert _names(select_offerings(_select(gpus={"min": 1}), CATALOGUE, 1)) == ["g4"]
    assert _names(select_offerings(_select(memory_gb={"min": 64, "max": 64}, cpus={"max": 8}), CATALOGUE, 1)) == ["m8"]


def test_order_is_cost_per_slot_then_catalogue_order_and_source_catalogue() -> None:
    picked = select_offerings(_select(gpus={"max": 0}, cpus={"max": 8}), CATALOGUE, 4)
    # Template slots: every flavor has 4 slots, so the order is the price (c2 < c4 < c8 < m8).
    assert _names(picked) == ["c2", "c4", "c8", "m8"]
    assert {(o.source, o.slots, o.zone, o.subnet) for o in picked} == {("catalogue", 4, None, None)}
    assert picked[0].cost_per_hour == pytest.approx(0.08)


def test_slots_cpus_makes_bigger_flavors_cheaper_per_slot() -> None:
    picked = select_offerings(_select(gpus={"max": 0}, cpus={"max": 8}, slots="cpus"), CATALOGUE, 1)
    # Per cpu: c2 0.04, c4 0.04, c8 0.03, m8 0.06; c2 before c4 by catalogue order.
    assert _names(picked) == ["c8", "c2", "c4", "m8"]
    assert [o.slots for o in picked] == [8, 2, 4, 8]


def test_zones_give_one_offering_per_flavor_and_listed_zone_it_is_in() -> None:
    picked = select_offerings(_select(cpus={"max": 4}, zones=["c", "a"]), CATALOGUE, 1)
    # c2 is in a, b, c: listed zones c and a, in the selection's order; c4 is only in a.
    assert _names(picked) == ["c2@c", "c2@a", "c4@a"]
    assert [(o.flavor, o.zone) for o in picked] == [("c2", "c"), ("c2", "a"), ("c4", "a")]
    # A flavor in none of the listed zones is not offered at all.
    assert select_offerings(_select(cpus={"min": 8, "max": 8}, memory_gb={"max": 32}, zones=["a"]), CATALOGUE, 1) == []


def test_price_falls_back_to_cost_per_cpu_hour_else_is_refused_naming_the_flavor() -> None:
    sel = _select(cpus={"min": 16, "max": 16}, cost_per_cpu_hour=0.02)
    [only] = select_offerings(sel, CATALOGUE, 1)
    assert (only.name, only.cost_per_hour) == ("noprice", pytest.approx(0.32))
    # A catalogue price wins over cost_per_cpu_hour.
    [c2] = select_offerings(_select(cpus={"max": 2}, cost_per_cpu_hour=1.0), CATALOGUE, 1)
    assert c2.cost_per_hour == pytest.approx(0.08)
    with pytest.raises(CatalogueError, match=r"flavor noprice .* no price .*select.cost_per_cpu_hour"):
        select_offerings(_select(cpus={"min": 16, "max": 16}), CATALOGUE, 1)


def test_max_cost_per_hour_drops_dearer_flavors_inclusive() -> None:
    picked = select_offerings(_select(max_cost_per_hour=0.24, gpus={"max": 0}, cost_per_cpu_hour=1), CATALOGUE, 1)
    assert _names(picked) == ["c2", "c4", "c8"]


def test_limit_keeps_the_cheapest_flavors_with_all_their_zones() -> None:
    picked = select_offerings(_select(gpus={"max": 0}, cpus={"max": 8}, zones=["a", "b"], limit=2), CATALOGUE, 1)
    assert _names(picked) == ["c2@a", "c2@b", "c4@a", "c4@b"]


def test_nothing_matches_is_an_empty_list() -> None:
    assert select_offerings(_select(gpus={"min": 8}), CATALOGUE, 1) == []
    assert select_offerings(_select(), [], 1) == []


GOOD = {"name": "c8.large", "cpus": 8, "memory_gb": 32, "gpus": 0, "cost_per_hour": 0.34, "zones": ["a"]}


def test_flavors_of_reads_a_good_output() -> None:
    [flavor] = flavors_of(
        [
            GOOD,
        ]
    )
    assert flavor == Flavor("c8.large", 8, 32.0, 0, 0.34, ("a",))
    [unpriced] = flavors_of([{**GOOD, "cost_per_hour": None, "zones": None, "cpus": 8.0}])
    assert (unpriced.cost_per_hour, unpriced.zones, unpriced.cpus) == (None, (), 8)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"flavors": []}, "flavors: expected a list, got dict"),
        (["c8"], "flavors[0]: expected an object, got str"),
        ([{**GOOD, "name": "a b"}], "flavors[0].name: 'a b' is not a flavor name"),
        ([{**GOOD, "name": "x@y"}], "is not a flavor name"),
        ([{**GOOD, "name": 7}], "flavors[0].name: 7 is not a flavor name"),
        ([{**GOOD, "cpus": "8"}], "flavors[0] (c8.large).cpus: expected a number, got str"),
        ([{**GOOD, "cpus": True}], "cpus: expected a number, got bool"),
        ([{**GOOD, "cpus": 0}], "cpus: 0 must be a whole number from 1"),
        ([{**GOOD, "cpus": 2.5}], "cpus: 2.5 must be a whole number"),
        ([{**GOOD, "cpus": 10**9}], "cpus: 1000000000 must be a finite number from 0 to 4096"),
        ([{**GOOD, "memory_gb": math.inf}], "memory_gb: inf must be a finite number"),
        ([{**GOOD, "memory_gb": math.nan}], "memory_gb: nan must be a finite number"),
        ([{**GOOD, "memory_gb": 0}], "memory_gb: 0 must be above 0"),
        ([{**GOOD, "gpus": -1}], "gpus: -1 must be a finite number from 0"),
        ([{**GOOD, "cost_per_hour": -0.1}], "cost_per_hour: -0.1 must be a finite number from 0"),
        ([{**GOOD, "zones": "a"}], "zones: expected a list"),
        ([{**GOOD, "zones": ["a\nb"]}], "zones: 'a\\nb' is not a zone name"),
        ([{**GOOD, "zones": ["z"] * 65}], "zones: expected a list of at most 64"),
        ([GOOD, GOOD], "flavors[1].name: 'c8.large' listed twice"),
        ([GOOD] * 5001, "flavors: 5001 entries, at most 5000"),
    ],
)
def test_flavors_of_refuses_a_bad_output_in_one_line(value: Any, says: str) -> None:
    with pytest.raises(CatalogueError) as caught:
        flavors_of(value)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200


def test_flavors_of_keeps_a_hostile_value_short() -> None:
    with pytest.raises(CatalogueError) as caught:
        flavors_of([{**GOOD, "name": "x" * 10_000}])
    assert len(str(caught.value)) < 200


SITE = """
cluster: demo
controller: {ca: system}
providers:
  sim: {module: xcesim}
  other: {module: xcesim}
templates:
  cpu:
    xce: {slots: 4}
    providers:
      sim: {image: debian-12, select: {cpus: {max: 4}}}
      other: {image: debian-12, select: {cpus: {min: 16}}}
  fixed:
    providers:
      sim: {flavor: c8, image: debian-12}
"""


def test_resolve_selections_maps_every_select_pair_and_says_why_one_is_empty() -> None:
    config = parse_config(SITE, "test.yaml", Path("/nonexistent")).config
    found = resolve_selections(config, {"sim": CATALOGUE[:2]}, {"other": "terraform failed"})
    assert set(found.selected) == {("cpu", "sim"), ("cpu", "other")}
    assert _names(found.selected[("cpu", "sim")]) == ["c2", "c4"]
    assert found.selected[("cpu", "other")] == []
    assert found.problems == {("cpu", "other"): "the catalogue of provider other is unavailable: terraform failed"}
    # An unpriced match is that pair's problem, not the whole mapping's failure.
    priced = resolve_selections(config, {"sim": CATALOGUE, "other": CATALOGUE})
    assert priced.selected[("cpu", "other")] == [] and "noprice" in priced.problems[("cpu", "other")]
    assert _names(resolve_selected(config, {"sim": CATALOGUE})[("cpu", "sim")]) == ["c2", "c4"]
