"""Several offerings per template and provider: the policy's order, what holds an offering back
(with its evidence), the budget at each offering's price, the ledger's offering, the preview."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_reconcile_scaleout import Pass

from orchestrator.clients.terraform.messages import Diagnostic
from orchestrator.daemon.statusdoc import cost_per_hour
from orchestrator.errors import UsageError
from orchestrator.model.demand import DemandSnapshot, TemplateDemand
from orchestrator.model.offerings import Offering, Placement, placement_detail
from orchestrator.model.ops import OpRequest
from orchestrator.ops.refusal import classify
from orchestrator.reconcile.budget import Usage
from orchestrator.reconcile.gap import gaps_from_ledger
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.offers import default_names
from orchestrator.reconcile.policy import choose_ops
from orchestrator.reconcile.scaleout import NO_LEASE, PolicyInputs, ScaleOutDecision, scale_out

CAPACITY = classify([Diagnostic("error", "InsufficientCapacity: flavor c4 has no capacity (limit 0)")])

# cpu on near: c8 (1.0/h, 2 slots: 0.5 a slot), c4 (0.4/h, 1 slot: 0.4), c8 in zone b named
# c8-b (0.8/h, 2 slots: 0.4, a tie with c4 listed later). gpu selects from the catalogue.
SITE = """
providers:
  near: {module: xcesim, priority: 20, max_instances: 20, budget_per_hour: 4}
  far: {module: xcesim, priority: 10, max_instances: 20}
templates:
  cpu:
    xce: {slots: 2}
    providers:
      near:
        image: deb
        offerings:
          - {flavor: c8, cost_per_hour: 1.0}
          - {flavor: c4, cost_per_hour: 0.4, slots: 1}
          - {flavor: c8, zone: b, cost_per_hour: 0.8, name: c8-b}
      far: {flavor: f8, image: deb, cost_per_hour: 2.0}
  gpu:
    providers:
      near: {image: deb, select: {gpus: {min: 1}}}
"""


@dataclass
class Holds:
    """What a memory of refusals holds: (provider, placement) → until; provider → until (quota)."""

    capacity_until: dict[tuple[str, str], float] = field(default_factory=dict)
    quota_until: dict[str, float] = field(default_factory=dict)

    def capacity(self, provider: str, placement: str, now: float) -> float | None:
        until = self.capacity_until.get((provider, placement))
        return until if until is not None and now < until else None

    def quota(self, provider: str, now: float) -> float | None:
        until = self.quota_until.get(provider)
        return until if until is not None and now < until else None


class World(Pass):
    """The scale-out tests' site and trackers, with a memory of refusals (``holds``)."""

    def __init__(self, tmp_path: Path, text: str = SITE) -> None:
        super().__init__(tmp_path, text)
        self.holds = Holds()

    def one(
        self,
        selected: Mapping[tuple[str, str], Sequence[Offering]] | None = None,
        unavailable: Mapping[str, str] | None = None,
        refused: frozenset[tuple[str, str]] = frozenset(),
        **wanted: int,
    ) -> ScaleOutDecision:
        snap = DemandSnapshot(
            seq=1, time=self.clock.now, templates=tuple(TemplateDemand(t, n) for t, n in wanted.items())
        )
        records = list(ledger(self.log.facts, default_names(self.config)).values())
        inputs = PolicyInputs(
            gaps_from_ledger(snap, records),
            records,
            self.health,
            self.breakers,
            self.clock.now,
            unavailable=unavailable or {},
            refused_now=refused,
            holds=self.holds,
            selected=selected or {},
        )
        [decision] = scale_out(self.config, inputs)
        return decision


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def provider(decision: ScaleOutDecision, name: str) -> dict[str, Any]:
    [entry] = [p for p in decision.evidence["providers"] if p["provider"] == name]
    return entry


def offerings(decision: ScaleOutDecision, name: str) -> list[tuple[str, int, str | None, float | None]]:
    return [(o["offering"], o["count"], o["skipped"], o["until"]) for o in provider(decision, name)["offerings"]]


def test_the_cheapest_offering_per_slot_takes_the_op_ties_in_configured_order(world: World) -> None:
    decision = world.one(cpu=3)
    assert decision.ops == (OpRequest("cpu", "near", 3, 3, (Placement("c4", 3),)),)
    assert offerings(decision, "near") == [("c4", 3, None, None), ("c8-b", 0, None, None), ("c8", 0, None, None)]
    near = provider(decision, "near")
    assert (near["count"], near["skipped"], near["until"]) == (3, None, None)
    [c8b] = [o for o in near["offerings"] if o["offering"] == "c8-b"]
    assert (c8b["flavor"], c8b["zone"], c8b["cost_per_hour"], c8b["cost_per_slot"]) == ("c8", "b", 0.8, 0.4)


def test_an_offering_in_backoff_is_skipped_with_its_until(world: World) -> None:
    until = world.clock.now + 120
    world.holds.capacity_until[("near", "c4")] = until
    decision = world.one(cpu=3)
    assert decision.ops == (OpRequest("cpu", "near", 3, 3, (Placement("c8-b", 3),)),)
    assert offerings(decision, "near")[:2] == [("c4", 0, "backoff", until), ("c8-b", 3, None, None)]
    # The memory knows the cloud's capacity by flavor@zone, whatever the offering's own name.
    world.holds.capacity_until[("near", "c8@b")] = until + 60
    assert world.one(cpu=3).ops[0].placements == (Placement("c8", 3),)
    # Once its backoff is over, the cheapest is asked first again.
    world.clock.advance(121)
    assert world.one(cpu=3).ops[0].placements == (Placement("c4", 3),)


def test_every_offering_in_backoff_passes_the_provider_over_to_the_next(world: World) -> None:
    now = world.clock.now
    for placement, after in (("c4", 300), ("c8@b", 100), ("c8", 200)):
        world.holds.capacity_until[("near", placement)] = now + after
    decision = world.one(cpu=3)
    assert decision.ops == (OpRequest("cpu", "far", 3, 3, (Placement("f8", 3),)),)
    near = provider(decision, "near")
    assert (near["skipped"], near["until"], near["count"]) == ("backoff", now + 100, 0)  # the first one back
    assert {o["skipped"] for o in near["offerings"]} == {"backoff"}


def test_a_capacity_refusal_holds_its_offering_in_its_phase_and_after(world: World) -> None:
    # Health records nothing for capacity: the memory of refusals holds the offering (refusals.py).
    assert world.health.failed("near", "cpu", CAPACITY, world.clock.now) == world.clock.now
    # In the phase that refused c4: only c4 is held, the rest goes to the next offering.
    same_phase = world.one(refused=frozenset({("near", "c4")}), cpu=2)
    assert same_phase.ops[0].placements == (Placement("c8-b", 2),)
    assert offerings(same_phase, "near")[0][:3] == ("c4", 0, "backoff")
    # A later pass: the memory holds c4 until its backoff ends; the provider's next offering serves.
    until = world.clock.now + 60
    world.holds.capacity_until[("near", "c4")] = until
    later = world.one(cpu=2)
    assert later.ops[0].placements == (Placement("c8-b", 2),)
    assert offerings(later, "near")[0] == ("c4", 0, "backoff", until)


def test_a_quota_hold_passes_the_provider_over_as_quota(world: World) -> None:
    until = world.clock.now + 600
    world.holds.quota_until["near"] = until
    decision = world.one(cpu=2)
    assert [op.provider for op in decision.ops] == ["far"]
    near = provider(decision, "near")
    assert (near["skipped"], near["until"]) == ("quota", until)


def test_providers_the_loop_cannot_ask_are_named_no_lease_and_open_op(world: World) -> None:
    decision = world.one(unavailable={"near": NO_LEASE, "far": "op op-1 awaits its retry at 9"}, cpu=1)
    assert (decision.outcome, decision.ops) == ("no-room", ())
    assert [provider(decision, p)["skipped"] for p in ("near", "far")] == ["no-lease", "open-op"]


def test_a_select_template_without_resolved_offerings_has_no_offering(world: World) -> None:
    decision = world.one(gpu=1)
    assert (decision.outcome, decision.ops) == ("no-room", ())
    assert (provider(decision, "near")["skipped"], provider(decision, "near")["offerings"]) == ("no-offering", [])
    resolved = [
        Offering("g2", "g2", cost_per_hour=2.0, source="catalogue"),
        Offering("g1", "g1", cost_per_hour=1.5, source="catalogue"),
    ]
    chosen = world.one(selected={("gpu", "near"): resolved}, gpu=1)
    assert chosen.ops == (OpRequest("gpu", "near", 1, 1, (Placement("g1", 1),)),)


def test_the_budget_counts_each_offering_at_its_own_price(world: World) -> None:
    # near's budget is 4/h: 10 of c4 at 0.4/h fit; held, c8-b at 0.8/h fits 5, the rest spills.
    assert world.one(cpu=10).ops == (OpRequest("cpu", "near", 10, 10, (Placement("c4", 10),)),)
    world.holds.capacity_until[("near", "c4")] = world.clock.now + 60
    dearer = world.one(cpu=10)
    assert [(op.provider, op.count, op.placements) for op in dearer.ops] == [
        ("near", 5, (Placement("c8-b", 5),)),
        ("far", 5, (Placement("f8", 5),)),
    ]
    room = provider(dearer, "near")["room"]
    assert (room["offering"], room["cost_per_hour"], room["limit"]) == ("c8-b", 0.8, "provider budget")


def test_instances_cost_their_offerings_price_and_the_default_when_it_is_gone(world: World) -> None:
    world.log.intent("op-a", "near", "cpu", 3, detail=placement_detail([Placement("c4", 1), Placement("c8-b", 2)]))
    world.log.intent("op-b", "near", "cpu", 1)  # names no offering: the default (first listed, c8)
    world.log.intent("op-c", "near", "cpu", 1, detail=placement_detail([Placement("removed", 1)]))
    records = ledger(world.log.facts, default_names(world.config))
    assert [records[k].offering for k in sorted(records)] == ["c4", "c8-b", "c8-b", "c8", "removed"]
    usage = Usage.of(world.config, records.values())
    # 0.4 + 2 × 0.8 + 1.0 (default) + 1.0 (an offering no longer configured: the default's price)
    assert usage.spend["near"] == pytest.approx(4.0)
    # The status file and the cost metric count the same (daemon/statusdoc.py).
    assert cost_per_hour({"near": world.log.facts}, world.config)["near"]["cpu"] == pytest.approx(4.0)
    # Without defaults (a reader with no configuration) a key of an intent naming none has "".
    assert ledger(world.log.facts)["op-b-000"].offering == ""
    # A warm-pool fill names none: its instances are on the default offering.
    [filled] = world.log.pool("op-fill", "near", "cpu", 1)
    assert ledger(world.log.facts, default_names(world.config))[filled].offering == "c8"


def test_one_op_places_on_several_offerings_when_the_next_has_more_room(tmp_path: Path) -> None:
    # big is cheapest per slot but 3.0/h: the 4/h budget takes 1; small (0.4/h) fits 2 more.
    text = """
providers:
  near: {module: xcesim, max_instances: 20, budget_per_hour: 4}
templates:
  cpu:
    xce: {slots: 10}
    providers:
      near:
        image: deb
        offerings:
          - {flavor: small, cost_per_hour: 0.4, slots: 1}
          - {flavor: big, cost_per_hour: 3.0}
"""
    world = World(tmp_path, text)
    decision = world.one(cpu=5)
    assert decision.ops == (OpRequest("cpu", "near", 3, 5, (Placement("big", 1), Placement("small", 2))),)
    assert offerings(decision, "near") == [("big", 1, None, None), ("small", 2, None, None)]


def test_the_preview_places_on_the_cheapest_offering(world: World) -> None:
    assert choose_ops(world.config, {"cpu": 3}, None, {}) == [
        OpRequest("cpu", "near", 3, 3, (Placement("c4", 3),)),
    ]
    with pytest.raises(UsageError, match=r"gpu=1: no offering of template 'gpu' on near"):
        choose_ops(world.config, {"gpu": 1}, None, {})
    resolved = {("gpu", "near"): [Offering("g1", "g1", cost_per_hour=1.5, source="catalogue")]}
    assert choose_ops(world.config, {"gpu": 1}, None, {}, resolved)[0].placements == (Placement("g1", 1),)


def test_the_order_of_the_configuration_guide_example(tmp_path: Path) -> None:
    """docs/configuration.md, "Offerings": cost per slot, ties in the order listed."""
    text = """
providers:
  aws: {module: xcesim}
templates:
  cpu:
    xce: {slots: 8}
    providers:
      aws:
        image: ami-0123
        cost_per_hour: 0.34
        offerings:
          - {flavor: c6i.2xlarge, zone: eu-west-1a}
          - {flavor: c6i.2xlarge, zone: eu-west-1b}
          - {flavor: c5.4xlarge, cost_per_hour: 0.68, slots: 16}
          - {flavor: m6i.2xlarge, cost_per_hour: 0.38}
"""
    world = World(tmp_path, text)
    decision = world.one(cpu=2)
    assert [o[0] for o in offerings(decision, "aws")] == [
        "c6i.2xlarge@eu-west-1a",
        "c6i.2xlarge@eu-west-1b",
        "c5.4xlarge",
        "m6i.2xlarge",
    ]
    assert decision.ops[0].placements == (Placement("c6i.2xlarge@eu-west-1a", 2),)
