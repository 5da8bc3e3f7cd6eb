"""A lease gained while a pass runs (a takeover) is resumed between two units of the phase in
flight, not after the phase: here, between two bootstrap calls of this daemon's own hosts."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tffake import SITE, FakeEngine, FakeFence

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.errors import LeaseLost
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.ops.executor import Created
from orchestrator.ops.openops import open_ops
from tests.unit.reconcile.test_reconcile_loop import build

TAKEN = "sim2"  # the provider another daemon held; its lease comes during this daemon's pass
TAKEN_OP = "op-6b49d200-0123456789ab"


def two_providers(tmp_path: Path) -> LoadedConfig:
    """The unit site with a second provider, and one host per bootstrap call."""
    text = SITE.format(cluster="unit", state=tmp_path / "state")
    text = text.replace(
        "  sim: {module: xcesim, max_instances: 10}\n",
        f"  sim: {{module: xcesim, max_instances: 10}}\n  {TAKEN}: {{module: xcesim, max_instances: 10}}\n",
    )
    text = text.replace(
        "      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}\n",
        "      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}\n"
        f"      {TAKEN}: {{flavor: c8.large, image: debian-12, cost_per_hour: 0.5}}\n",
    )
    text += "ansible: {forks: 1}\n"
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


class TakenDuringBootstrap(FakeFence):
    """``sim`` held throughout; ``sim2`` not held until ``grant()``."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = False

    def gate(self, provider: str) -> Epoch:
        if provider == TAKEN and not self.taken:
            raise LeaseLost(f"no lease for provider {provider!r}")
        return self.epoch

    def valid(self, provider: str) -> bool:
        return provider != TAKEN or self.taken


def test_a_lease_gained_during_the_bootstrap_phase_is_resumed_before_its_next_bootstrap_call(
    tmp_path: Path,
) -> None:
    loaded = two_providers(tmp_path)
    fence = TakenDuringBootstrap()
    calls: list[tuple[str, bool]] = []

    def bootstrap(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        taken_done = not open_ops(facts.facts(TAKEN))
        calls.append((created[0].name, taken_done))
        fence.taken = True  # the lease of sim2 is granted while the first call runs
        return {c.name: "ok" for c in created}

    reconciler, view, facts, clock = build(loaded, FakeEngine(), bootstrap, fence)
    fence.taken = True
    reconciler.executor.place(TAKEN, "cpu", 1, TAKEN_OP)  # the previous holder's op: intent and desired set
    fence.taken = False
    epoch = Epoch(3, 7)
    facts.commit(Fact(FactKind.REQUEST_INTENT, "sim", "op-1", epoch, template="cpu", count=2))
    for n in (1, 2):  # two hosts of this daemon's own, due for their bootstrap: two calls (forks 1)
        key = f"op-1-00{n - 1}"
        common = {"instance_key": key, "instance_id": f"i-{n}", "template": "cpu", "host_name": f"h{n}"}
        facts.commit(Fact(FactKind.INSTANCE_CREATED, "sim", "op-1", epoch, **common))
        facts.commit(Fact(FactKind.EXPECTED_HOST, "sim", "op-1", epoch, join_deadline=clock.now + 900, **common))
    view.want(cpu=3)  # the two hosts and the taken op's one: no new op
    report = reconciler.run_once("interval")
    # The first call ran before the grant; the taken op was resumed before the second call.
    assert calls == [("h1", False), ("h2", True)]
    names = [p.name for p in report.phases]
    assert names.index("resume", 2) < names.index("bootstrap")  # reported as it finished: before the phase
    created = {f.instance_key for f in facts.facts(TAKEN) if f.kind == FactKind.INSTANCE_CREATED}
    assert len(created) == 1 and open_ops(facts.facts(TAKEN)) == []
