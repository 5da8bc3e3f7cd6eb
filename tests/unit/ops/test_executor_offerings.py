"""A create places its keys on offerings: the intent's detail names them, every key is rendered
on its own, and a resume applies what was planned (an op made before offerings stays on the
default offering, the flavor it always had)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tffake import SITE, FakeEngine, MemoryFacts, unit_executor

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.errors import ConfigError, UsageError
from orchestrator.model import tags as owner
from orchestrator.model.facts import FactKind
from orchestrator.model.offerings import Offering, Placement, placement_detail
from orchestrator.ops.executor import Executor
from orchestrator.workspace.workdir import ProviderWorkdir

OFFERINGS = """
  wide:
    providers:
      sim:
        image: debian-12
        cost_per_hour: 0.5
        offerings:
          - {{flavor: c8.large}}
          - {{flavor: c16.large, zone: zone-b, cost_per_hour: 0.8, slots: 2}}
  picked:
    providers:
      sim: {{image: debian-12, select: {{cpus: {{min: 4}}}}}}
"""
OP = "op-6b49d200-0123456789ab"


def loaded(tmp_path: Path) -> LoadedConfig:
    text = (SITE + OFFERINGS).format(cluster="unit", state=tmp_path / "state")
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


def desired(executor: Executor) -> dict[str, tuple[str, str | None, str]]:
    """Each desired key's flavor, zone and offering tag."""
    return {k: (s.flavor, s.zone, s.tags[owner.OFFERING]) for k, s in executor.desired("sim").items()}


def test_a_create_renders_each_key_on_its_placed_offering(tmp_path: Path) -> None:
    engine, facts = FakeEngine(), MemoryFacts()
    executor = unit_executor(loaded(tmp_path), engine, facts=facts)
    placements = (Placement("c16.large@zone-b", 2), Placement("c8.large", 1))
    result = executor.create("sim", "wide", 3, OP, placements=placements)
    assert len(result.created) == 3
    assert desired(executor) == {
        f"{OP}-000": ("c16.large", "zone-b", "c16.large@zone-b"),
        f"{OP}-001": ("c16.large", "zone-b", "c16.large@zone-b"),
        f"{OP}-002": ("c8.large", None, "c8.large"),
    }
    [intent] = [f for f in facts.facts("sim") if f.kind == FactKind.REQUEST_INTENT]
    assert intent.detail == 'offerings [["c16.large@zone-b",2],["c8.large",1]]'


def test_placements_must_add_up_to_the_count(tmp_path: Path) -> None:
    executor = unit_executor(loaded(tmp_path), FakeEngine(), facts=MemoryFacts())
    with pytest.raises(UsageError, match=r"placements c8.large=1 place 1 instances, not 2"):
        executor.create("sim", "wide", 2, OP, placements=(Placement("c8.large", 1),))


def test_a_resume_applies_every_key_on_the_offering_it_was_planned_on(tmp_path: Path) -> None:
    engine, facts = FakeEngine(), MemoryFacts()
    executor = unit_executor(loaded(tmp_path), engine, facts=facts)
    placements = (Placement("c8.large", 1), Placement("c16.large@zone-b", 1))
    executor.place("sim", "wide", 2, OP, placements=placements)
    [intent] = facts.facts("sim")
    assert intent.detail == placement_detail(placements)

    [done] = unit_executor(loaded(tmp_path), engine, facts=facts).resume("sim")
    assert done.outcome == "completed"
    applied = engine.plan_variables[-1]["instances"]
    assert {k: (e["flavor"], e.get("zone")) for k, e in applied.items()} == {
        f"{OP}-000": ("c8.large", None),
        f"{OP}-001": ("c16.large", "zone-b"),
    }
    held = {k: e["tags"][owner.OFFERING] for shard in executor.shards("sim") for k, e in _state(engine, shard)}
    assert held == {f"{OP}-000": "c8.large", f"{OP}-001": "c16.large@zone-b"}


def test_an_op_placed_before_offerings_resumes_on_the_legacy_flavor(tmp_path: Path) -> None:
    engine, facts = FakeEngine(), MemoryFacts()
    executor = unit_executor(loaded(tmp_path), engine, facts=facts)
    executor.place("sim", "wide", 1, OP, detail='{"contract": {}}')  # no placements in its detail
    [done] = executor.resume("sim")
    assert done.outcome == "completed"
    assert desired(executor) == {f"{OP}-000": ("c8.large", None, "c8.large")}
    with pytest.raises(UsageError, match="its placements or"):
        executor.place("sim", "wide", 1, "op-6b49d200-0123456789ac", detail="x", placements=[Placement("c8.large", 1)])


def _state(engine: FakeEngine, shard: ProviderWorkdir) -> list[tuple[str, dict[str, Any]]]:
    return list(engine.state(shard.path)["instances"].items())


def test_a_select_template_renders_on_the_offerings_its_catalogue_gave(tmp_path: Path) -> None:
    found = [Offering("c4.large@zone-a", "c4.large", "zone-a", None, 0.2, 1, "catalogue")]
    executor = unit_executor(
        loaded(tmp_path), FakeEngine(), facts=MemoryFacts(), selected=lambda: {("picked", "sim"): found}
    )
    executor.create("sim", "picked", 1, OP, placements=[Placement("c4.large@zone-a", 1)])
    assert desired(executor) == {f"{OP}-000": ("c4.large", "zone-a", "c4.large@zone-a")}


def test_a_select_template_without_its_catalogue_is_refused_in_one_line(tmp_path: Path) -> None:
    engine, facts = FakeEngine(), MemoryFacts()
    executor = unit_executor(loaded(tmp_path), engine, facts=facts)
    with pytest.raises(ConfigError) as caught:
        executor.create("sim", "picked", 1, OP, placements=[Placement("c4.large", 1)])
    assert caught.value.problems == [
        "template picked on provider sim: selects flavors from the provider's catalogue, "
        "and no offering was resolved from it"
    ]
    assert facts.facts("sim") == []  # refused before its intent: nothing recorded, nothing asked
