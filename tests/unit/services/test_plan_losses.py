"""A preview after host loss tells what ``apply`` will do, through the fake engine and the real observer.

What a user would notice: after an instance is deleted behind Terraform's back, ``plan`` shows it
lost and adds only the burst's hosts (not a re-create), counts no room for it, and writes
nothing (no fact, no suspect, no desired set); ``apply`` of that bundle records the loss and
creates what the preview showed; a bundle whose losses are not the cloud's any more is refused
as stale with nothing changed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tffake import ROOT, FakeEngine, MemoryFacts, unit_ops

from orchestrator.configfile import LoadedConfig
from orchestrator.errors import StaleState
from orchestrator.model.facts import FactKind
from orchestrator.ops.executor import Created, Wired
from orchestrator.ops.hostloss import MISSING, SUSPECTS_FILE
from orchestrator.ops.losses import observer_for
from orchestrator.services.apply import apply_bundle
from orchestrator.services.plan import plan_burst
from orchestrator.workspace.workdir import ProviderWorkdir


def workdir(loaded: LoadedConfig) -> Path:
    return ProviderWorkdir(loaded.config, "sim", ROOT).path


def wired(loaded: LoadedConfig, engine: FakeEngine, facts: MemoryFacts) -> Wired:
    """An executor whose host-loss check is the product's own (``observer_for``), with its parts."""
    return unit_ops(loaded, engine, facts=facts, losses=observer_for)


def lost_keys(facts: MemoryFacts) -> list[str]:
    return [f.instance_key for f in facts.committed if f.kind == FactKind.LOST]


def two_then_one_gone(loaded: LoadedConfig, engine: FakeEngine, facts: MemoryFacts) -> tuple[Created, Created]:
    """Two hosts created, then the first deleted behind Terraform's back."""
    gone, kept = wired(loaded, engine, facts).executor.create("sim", "cpu", 2).created
    FakeEngine.vanish(workdir(loaded), gone.key)
    return gone, kept


def test_the_preview_shows_the_lost_instance_and_adds_what_apply_adds(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    facts = MemoryFacts()
    gone, kept = two_then_one_gone(loaded, engine, facts)
    desired_before = (workdir(loaded) / "desired.tfvars.json").read_text()

    plan = plan_burst(loaded, {"cpu": 1}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)

    [sim] = plan.providers
    assert [(i.key, i.instance_id, i.template, i.name, i.reason) for i in sim.lost] == [
        (gone.key, gone.instance_id, "cpu", gone.name, MISSING)
    ]
    assert (sim.add, sim.destroy) == (1, 0) and [i.action for i in sim.instances] == ["create"]
    assert plan.to_json()["providers"][0]["lost"][0]["key"] == gone.key
    # Read-only: no suspect counted, no fact, the desired set as it was.
    assert not (workdir(loaded) / SUSPECTS_FILE).exists()
    assert lost_keys(facts) == []
    assert (workdir(loaded) / "desired.tfvars.json").read_text() == desired_before

    [done] = apply_bundle(loaded, tmp_path / "b", ROOT, wired=wired(loaded, engine, facts))

    assert lost_keys(facts) == [gone.key]
    [op] = done.ops
    assert [c.key for c in op.created] == [sim.instances[0].key]
    assert sorted(done.instances) == sorted([kept.key, sim.instances[0].key])


def test_a_lost_instance_takes_no_room(loaded: LoadedConfig, engine: FakeEngine) -> None:
    facts = MemoryFacts()
    wired(loaded, engine, facts).executor.create("sim", "cpu", 8)
    two_then_one_gone(loaded, engine, facts)  # 10 held, the provider's max_instances: one lost
    [sim] = plan_burst(loaded, {"cpu": 1}, toolkit_root=ROOT, engine=engine).providers
    assert (sim.add, len(sim.lost)) == (1, 1)


def test_a_bundle_saved_before_the_loss_is_refused_and_nothing_changes(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    facts = MemoryFacts()
    wired(loaded, engine, facts).executor.create("sim", "cpu", 2)
    plan_burst(loaded, {"cpu": 1}, out=tmp_path / "before", toolkit_root=ROOT, engine=engine)
    [gone, _kept] = sorted(ProviderWorkdir(loaded.config, "sim", ROOT).desired.read())
    FakeEngine.vanish(workdir(loaded), gone)
    desired_before = (workdir(loaded) / "desired.tfvars.json").read_text()
    facts_before = list(facts.committed)
    engine.calls.clear()

    stale = f"preview showed no instance lost on provider sim, the cloud now shows {gone} lost"
    with pytest.raises(StaleState, match=stale):
        apply_bundle(loaded, tmp_path / "before", ROOT, wired=wired(loaded, engine, facts))

    assert "apply" not in [verb for verb, _ in engine.calls]
    assert facts.committed == facts_before
    assert (workdir(loaded) / "desired.tfvars.json").read_text() == desired_before
    assert not (workdir(loaded) / SUSPECTS_FILE).exists()


def test_a_bundle_showing_a_loss_the_cloud_no_longer_shows_is_refused(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    facts = MemoryFacts()
    gone, _kept = two_then_one_gone(loaded, engine, facts)
    plan_burst(loaded, {"cpu": 1}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)
    FakeEngine.vanish(workdir(loaded), gone.key, back=True)  # the read had raced the cloud's API

    with pytest.raises(StaleState, match=f"preview showed {gone.key} lost on provider sim, the cloud now shows no"):
        apply_bundle(loaded, tmp_path / "b", ROOT, wired=wired(loaded, engine, facts))
    assert lost_keys(facts) == []
    assert gone.key in ProviderWorkdir(loaded.config, "sim", ROOT).desired.read()
