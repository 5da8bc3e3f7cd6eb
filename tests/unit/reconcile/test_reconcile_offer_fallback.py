"""A create refused for capacity on one offering falls back at once to the next offering of the
same provider, in the same scale-out phase (a scripted executor over the in-memory controller)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reconcile_support import FakeClock
from test_reconcile_loop import FakeView
from tffake import SITE, FakeEngine, FakeFence, FakeHosts, MemoryFacts, unit_ops

from orchestrator.configfile import parse_config
from orchestrator.errors import CapacityRefused
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import instance_key
from orchestrator.model.offerings import Offering, Placement, placement_detail, placements_of
from orchestrator.ops.executor import Created, CreateResult, Executor
from orchestrator.ops.openops import open_ops
from orchestrator.reconcile.loop import Reconciler
from orchestrator.reconcile.results import ScaleOutResult

# cpu on sim: "a" (cheapest, refused for capacity by the cloud below), then "b".
ONE_FLAVOR = "sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}"
TWO_OFFERINGS = "sim: {image: debian-12, offerings: [{flavor: a, cost_per_hour: 0.4}, {flavor: b, cost_per_hour: 0.6}]}"


class NoRoomOn:
    """The executor's create, scripted: an op placed on ``offering`` commits its intent and is
    refused for capacity (as Terraform's apply would be); any other op's hosts are made at once.
    Every other operation (resume, closing a refused op) is the real executor's."""

    def __init__(self, real: Executor, facts: MemoryFacts, fence: FakeFence, offering: str) -> None:
        self.real, self.facts, self.fence, self.offering = real, facts, fence, offering
        self.asked: list[tuple[str, ...]] = []

    def create(
        self,
        provider: str,
        template: str,
        count: int,
        op_id: str | None = None,
        *,
        pool: bool = False,
        placements: Sequence[Placement] | None = None,
    ) -> CreateResult:
        assert op_id is not None and placements
        self.asked.append(tuple(p.offering for p in placements))
        epoch, detail = self.fence.gate(provider), placement_detail(placements)
        intent = Fact(FactKind.REQUEST_INTENT, provider, op_id, epoch, template=template, count=count, detail=detail)
        self.facts.commit(intent)
        if any(p.offering == self.offering for p in placements):
            raise CapacityRefused(
                f"InsufficientCapacity: flavor {self.offering} has no capacity", "InsufficientCapacity"
            )
        made = []
        for index in range(count):
            key = instance_key(op_id, index)
            common = {"instance_key": key, "instance_id": f"i-{key}", "template": template, "host_name": f"h-{key}"}
            self.facts.commit(Fact(FactKind.INSTANCE_CREATED, provider, op_id, intent.epoch, **common))
            self.facts.commit(Fact(FactKind.EXPECTED_HOST, provider, op_id, intent.epoch, join_deadline=9e9, **common))
            made.append(Created(key, f"i-{key}", f"h-{key}", "10.0.0.1", template, 9e9))
        return CreateResult(op_id, provider, template, made)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def scripted(
    tmp_path: Path, cpu: str, refused: str, **parts: Any
) -> tuple[Reconciler, FakeView, NoRoomOn, MemoryFacts]:
    """A reconciler over :class:`NoRoomOn` (refusing ``refused``), cpu's block on sim ``cpu``."""
    text = SITE.format(cluster="unit", state=tmp_path / "state")
    assert ONE_FLAVOR in text
    loaded = parse_config(text.replace(ONE_FLAVOR, cpu), "x.yaml", tmp_path)
    facts, hosts, clock, fence = MemoryFacts(), FakeHosts(), FakeClock(), FakeFence()
    ops = unit_ops(loaded, FakeEngine(), facts=facts, hosts=hosts, fence=fence, clock=lambda: clock.now, **parts)
    executor = NoRoomOn(ops.executor, facts, fence, refused)
    view = FakeView(facts, hosts)
    wired = (executor, ops.parts)
    state_dir = loaded.config.state_dir
    reconciler = Reconciler(loaded.config, wired, view, clock=lambda: clock.now, state_dir=state_dir)  # type: ignore[arg-type]
    return reconciler, view, executor, facts


def test_a_capacity_refusal_on_one_offering_moves_the_rest_to_the_next_in_the_same_phase(tmp_path: Path) -> None:
    reconciler, view, executor, facts = scripted(tmp_path, TWO_OFFERINGS, "a")
    view.want(cpu=3)
    report = reconciler.run_once()
    result = report.result("scale-out", ScaleOutResult)
    # One attempt on "a", refused and closed; the rest at once on "b", in the same phase.
    assert executor.asked == [("a",), ("b",)] and result.rounds == 2
    assert [f.closed for f in result.failed] == [True] and [(o.provider, o.count) for o in result.created] == [
        ("sim", 3)
    ]
    intents = [f for f in facts.committed if f.kind == FactKind.REQUEST_INTENT]
    assert [placements_of(f.detail) for f in intents] == [[Placement("a", 3)], [Placement("b", 3)]]
    returned = {f.instance_key for f in facts.committed if f.kind == FactKind.RETURNED}
    assert returned == {instance_key(intents[0].op_id, i) for i in range(3)} and open_ops(facts.facts("sim")) == []
    # The second round's decision says why: "a" refused in this phase, "b" took the three.
    second = [d for d in report.decisions if d.ops][1]
    [sim] = second.evidence["providers"]
    assert [(o["offering"], o["count"], o["skipped"]) for o in sim["offerings"]] == [
        ("a", 0, "backoff"),
        ("b", 3, None),
    ]
    # The next pass: nothing more is wanted, so nothing more is asked.
    assert reconciler.run_once().ops == [] and executor.asked == [("a",), ("b",)]


def test_a_select_template_is_placed_on_the_offerings_its_catalogue_gave(tmp_path: Path) -> None:
    """The policy reads the same selections the executor renders with (its parts' ``selected``)."""
    chosen = {
        ("cpu", "sim"): [
            Offering("c2", "c2", cost_per_hour=0.2, source="catalogue"),
            Offering("c4", "c4", cost_per_hour=0.3, slots=2, source="catalogue"),
        ]
    }
    select = "sim: {image: debian-12, select: {cpus: {min: 2}}}"
    reconciler, view, executor, _facts = scripted(tmp_path, select, "c4", selected=lambda: chosen)
    view.want(cpu=2)
    result = reconciler.run_once().result("scale-out", ScaleOutResult)
    # c4 is cheaper per slot (0.15) and refused; c2 (0.2) takes the two in the same phase.
    assert executor.asked == [("c4",), ("c2",)] and [o.count for o in result.created] == [2]
    # Without the catalogue's selections the template has no offering: nothing is asked.
    reconciler, view, executor, _ = scripted(tmp_path / "none", select, "c4")
    view.want(cpu=2)
    [decision] = [d for d in reconciler.run_once().decisions if d.template == "cpu"]
    assert executor.asked == [] and decision.evidence["providers"][0]["skipped"] == "no-offering"
