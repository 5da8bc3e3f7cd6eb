"""Host loss in a create op (and a resumed return), with the real observer and tracker over the fake engine.

What a user would notice: a create where nothing went missing asks Terraform for one plan
before its apply; an instance deleted behind Terraform's back is found by the op's own plan,
judged lost on the next read (two consecutive observations), gets a ``lost`` fact, leaves the
desired set and is never re-created, while the op creates its hosts; a deletion that is not
judged lost refuses the op instead of re-creating the instance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tffake import ROOT, CrashOn, FakeEngine, MemoryFacts, unit_executor, unit_ops

from orchestrator.configfile import LoadedConfig
from orchestrator.errors import UnsafePlan
from orchestrator.model.facts import Fact, FactKind
from orchestrator.ops.executor import Created, Executor
from orchestrator.ops.hostloss import MISSING, SUSPECTS_FILE, LossTracker
from orchestrator.ops.losses import observer_for
from orchestrator.ops.openops import open_ops
from orchestrator.workspace.cloudview import Drift
from orchestrator.workspace.workdir import ProviderWorkdir


def workdir(loaded: LoadedConfig) -> Path:
    return ProviderWorkdir(loaded.config, "sim", ROOT).path


def executor(loaded: LoadedConfig, engine: FakeEngine, facts: MemoryFacts) -> Executor:
    """An executor whose host-loss check is the product's own (``observer_for``)."""
    return unit_executor(loaded, engine, facts=facts, losses=observer_for)


def terraform_runs(engine: FakeEngine) -> list[str]:
    """The Terraform commands asked since the test last cleared ``engine.calls``."""
    return [verb for verb, _path in engine.calls if verb in ("plan", "show_plan", "apply")]


def lost_facts(facts: MemoryFacts) -> list[tuple[str, str, dict[str, object]]]:
    return [(f.instance_key, f.instance_id, json.loads(f.detail)) for f in facts.committed if f.kind == FactKind.LOST]


def test_a_create_with_nothing_lost_runs_one_plan_before_its_apply(loaded: LoadedConfig, engine: FakeEngine) -> None:
    facts = MemoryFacts()
    first = executor(loaded, engine, facts).create("sim", "cpu", 2)
    # A suspect from an earlier observation (one read found it missing) is pending.
    tracker = LossTracker(workdir(loaded) / SUSPECTS_FILE)
    one = first.created[0]
    tracker.observe(Drift(deleted={one.key: one.instance_id}), None)
    engine.calls.clear()

    second = executor(loaded, engine, facts).create("sim", "cpu", 1)

    assert terraform_runs(engine) == ["plan", "apply"]
    # The instances come from the apply's own outputs: no `terraform output` after it.
    assert [verb for verb, _path in engine.calls][-1] == "apply"
    # The op's plan saw it present: forgiven, so a later absence starts counting afresh.
    assert tracker.suspects() == {}
    assert sorted(FakeEngine.state(workdir(loaded))["instances"]) == sorted(
        [*(c.key for c in first.created), second.created[0].key]
    )
    assert lost_facts(facts) == []


@pytest.mark.parametrize(
    ("listed", "reason"),
    [(None, MISSING), (("terminated", "spot-reclaim"), "spot-reclaim")],
    ids=["out-of-band-delete", "spot-reclaim"],
)
def test_a_create_after_a_delete_behind_terraforms_back_retires_the_lost_instance(
    loaded: LoadedConfig, engine: FakeEngine, listed: tuple[str, str] | None, reason: str
) -> None:
    facts = MemoryFacts()
    first = executor(loaded, engine, facts).create("sim", "cpu", 2)
    gone, kept = first.created
    FakeEngine.vanish(workdir(loaded), gone.key)
    engine.listed = {gone.instance_id: listed} if listed else {}  # no listing: the module cannot list
    engine.calls.clear()

    second = executor(loaded, engine, facts).create("sim", "cpu", 1)

    # The op's plan (first observation), one refresh-only read of drift (second) and of the
    # listing (the reason), then the op planned again without the lost key, and applied.
    assert terraform_runs(engine) == ["plan", "plan", "plan", "show_plan", "plan", "apply"]
    [(key, instance_id, detail)] = lost_facts(facts)
    assert (key, instance_id, detail["reason"], detail["observations_missing"]) == (
        gone.key,
        gone.instance_id,
        reason,
        2,
    )
    state = FakeEngine.state(workdir(loaded))["instances"]
    assert sorted(state) == sorted([kept.key, second.created[0].key])
    assert gone.key not in ProviderWorkdir(loaded.config, "sim", ROOT).desired.read()
    # Only the op's key was ever planned for creation in the apply that ran.
    assert engine.planned_creates[-1] == (workdir(loaded), [second.created[0].key])


def one_host_gone(loaded: LoadedConfig, engine: FakeEngine, facts: MemoryFacts) -> Created:
    """One host created, then deleted behind Terraform's back."""
    [made] = executor(loaded, engine, facts).create("sim", "cpu", 1).created
    FakeEngine.vanish(workdir(loaded), made.key)
    return made


def test_a_deletion_the_cloud_lists_alive_refuses_the_create_instead_of_recreating(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    facts = MemoryFacts()
    made = one_host_gone(loaded, engine, facts)
    engine.listed = {made.instance_id: ("running", "")}  # the refresh raced the API
    engine.calls.clear()

    with pytest.raises(UnsafePlan, match=f"create {made.key}"):
        executor(loaded, engine, facts).create("sim", "cpu", 1)

    assert "apply" not in terraform_runs(engine)
    assert lost_facts(facts) == []
    assert sorted(ProviderWorkdir(loaded.config, "sim", ROOT).desired.read()) == [made.key]
    assert LossTracker(workdir(loaded) / SUSPECTS_FILE).suspects() == {}  # listed alive: forgiven


def test_a_deletion_the_next_read_no_longer_sees_is_forgiven_and_the_op_goes_on(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    facts = MemoryFacts()
    made = one_host_gone(loaded, engine, facts)
    path = workdir(loaded)
    op_plan = engine.plan

    def plan_then_reappear(*args: object, **kwargs: object) -> object:
        result = op_plan(*args, **kwargs)  # type: ignore[arg-type]
        FakeEngine.vanish(path, made.key, back=True)  # the cloud answers again after this read
        return result

    engine.plan = plan_then_reappear  # type: ignore[method-assign]
    second = executor(loaded, engine, facts).create("sim", "cpu", 1)

    assert lost_facts(facts) == []
    assert sorted(FakeEngine.state(path)["instances"]) == sorted([made.key, second.created[0].key])
    assert LossTracker(path / SUSPECTS_FILE).suspects() == {}


def test_a_resumed_op_whose_own_instance_was_lost_records_the_rest_and_completes(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    facts = CrashOn(FactKind.INSTANCE_CREATED)
    crashed = executor(loaded, engine, facts)
    with pytest.raises(KeyboardInterrupt):
        crashed.create("sim", "cpu", 3)  # applied, then the crash before its facts
    path = workdir(loaded)
    state = FakeEngine.state(path)["instances"]
    gone, unapplied, kept = sorted(state)
    # As if the apply had stopped before one create, and the cloud took another instance since.
    FakeEngine._write_state(path, {k: v for k, v in state.items() if k != unapplied})
    FakeEngine.vanish(path, gone)

    [done] = executor(loaded, engine, facts).resume("sim")

    assert done.outcome == "completed"
    assert [k for k, _id, _detail in lost_facts(facts)] == [gone]
    recorded = sorted(f.instance_key for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED)
    assert recorded == sorted([unapplied, kept])  # the lost one is accounted for by its lost fact
    assert sorted(FakeEngine.state(path)["instances"]) == sorted([unapplied, kept])
    assert open_ops(facts.facts("sim")) == []


def test_a_resumed_return_beside_an_instance_the_cloud_took_back_records_it_lost_and_completes(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    """A return op left open (its ``returning`` intent committed, nothing applied) while the cloud
    reclaimed another instance: resume's return path runs the host-loss path first, so its plan
    neither re-creates the reclaimed instance (a refused plan, the op open for ever) nor waits."""
    facts = MemoryFacts()
    first, parts = unit_ops(loaded, engine, facts=facts, losses=observer_for)
    made = first.create("sim", "cpu", 3).created
    returned, reclaimed, kept = sorted(made, key=lambda c: c.key)
    epoch = parts.recorder.gate("sim", "op-return", "returning facts")
    intent = Fact(FactKind.RETURNING, "sim", "op-return", epoch, instance_key=returned.key, template="cpu")
    parts.recorder.commit_many([intent])
    path = workdir(loaded)
    FakeEngine.vanish(path, reclaimed.key)
    engine.listed = {reclaimed.instance_id: ("terminated", "spot-reclaim"), kept.instance_id: ("running", "")}
    engine.planned_creates.clear()

    [done] = executor(loaded, engine, facts).resume("sim")

    assert (done.op_id, done.outcome) == ("op-return", "completed")
    assert "1 found lost" not in done.reason  # the returned key was deleted, not found lost
    assert [(k, detail["reason"]) for k, _id, detail in lost_facts(facts)] == [(reclaimed.key, "spot-reclaim")]
    assert FakeEngine.present(path) == {kept.key}
    assert not any(keys for _where, keys in engine.planned_creates)  # nothing re-created
    assert open_ops(facts.facts("sim")) == []


def test_observe_losses_records_each_reclaim_once_whenever_it_is_read_again(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    # The daemon's notice watch hands the keys whose reclaim came, one reclaim after another; the
    # state holds a retired instance until an apply, so the second read reports the first again.
    facts = MemoryFacts()
    ex = executor(loaded, engine, facts)
    first, second = ex.create("sim", "cpu", 2).created
    FakeEngine.vanish(workdir(loaded), first.key)
    engine.listed = {first.instance_id: ("terminated", "spot-reclaim")}
    assert ex.observe_losses("sim", [first.key], "op-check-1") == [first.key]
    FakeEngine.vanish(workdir(loaded), second.key)
    engine.listed[second.instance_id] = ("terminated", "spot-reclaim")
    assert ex.observe_losses("sim", [second.key], "op-check-2") == [second.key]
    assert ex.observe_losses("sim", [first.key, second.key], "op-check-3") == []
    lost = lost_facts(facts)
    assert sorted(key for key, _, _ in lost) == sorted([first.key, second.key])
    assert {detail["reason"] for _, _, detail in lost} == {"spot-reclaim"}
    # Each under the op that made it, whichever check read it.
    assert {f.op_id for f in facts.committed if f.kind == FactKind.LOST} == {first.key.rsplit("-", 1)[0]}
