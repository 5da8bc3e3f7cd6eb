"""The executor's decisions through a fake Terraform engine and an in-memory controller.

What a user would notice: the intent is committed before the cloud is touched; the cloud gets
the lease's epoch; a closed fence stops everything and leaves the op resumable; resume makes
facts and state agree without duplicates; busy hosts are refused or drained; lost hosts get a
``lost`` fact and are never re-created.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import pytest
from tffake import ROOT, CrashOn, FakeEngine, FakeFence, FakeHosts, MemoryFacts, unit_executor, unit_parts

from orchestrator.clients.terraform.messages import PlanResult
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import FinalError, HostBusy, LeaseLost, RetryableError
from orchestrator.model import tags as owner
from orchestrator.model.facts import Fact, FactKind
from orchestrator.ops.drain import DrainSettings
from orchestrator.ops.executor import CreateOp, LossPath, ShardSet, TerraformSteps
from orchestrator.ops.openops import open_ops
from orchestrator.workspace.cloudview import Drift, drift_from_stream
from orchestrator.workspace.workdir import ProviderWorkdir


def held(loaded: LoadedConfig) -> dict[str, Any]:
    return dict(FakeEngine.state(ProviderWorkdir(loaded.config, "sim", ROOT).path)["instances"])


def desired(loaded: LoadedConfig) -> list[str]:
    return sorted(ProviderWorkdir(loaded.config, "sim", ROOT).desired.read())


def actions(loaded: LoadedConfig) -> list[str]:
    path = loaded.config.state_dir / "audit.log"
    return [json.loads(line)["action"] for line in path.read_text().splitlines()]


def agree(facts: MemoryFacts, loaded: LoadedConfig) -> None:
    """Facts and the state tell the same story: every held instance created once, nothing open."""
    created = [f.instance_key for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED]
    gone = {f.instance_key for f in facts.committed if f.kind in (FactKind.RETURNED, FactKind.LOST)}
    assert len(created) == len(set(created))
    assert set(created) - gone == set(held(loaded))
    assert open_ops(facts.facts("sim")) == []


def test_create_commits_the_intent_first_and_stamps_the_epoch(loaded: LoadedConfig, engine: FakeEngine) -> None:
    facts = MemoryFacts()
    result = unit_executor(loaded, engine, facts=facts).create("sim", "cpu", 2)
    assert facts.kinds() == ["requestIntent", "instanceCreated", "expectedHost", "instanceCreated", "expectedHost"]
    intent = facts.committed[0]
    assert (intent.op_id, intent.template, intent.count, intent.epoch.tag()) == (result.op_id, "cpu", 2, "3.7")
    assert {i["tags"][owner.EPOCH] for i in held(loaded).values()} == {"3.7"}
    assert {i["tags"][owner.OP_ID] for i in held(loaded).values()} == {result.op_id}
    expected = [f for f in facts.committed if f.kind == FactKind.EXPECTED_HOST]
    assert all(f.join_deadline > 0 and f.host_name and f.instance_id for f in expected)
    # The intent was durable before the desired set grew, and that before Terraform applied.
    order = actions(loaded)
    assert order.index("fact-requestIntent") < order.index("op-desired") < order.index("op-apply")
    agree(facts, loaded)


def test_every_plan_hands_the_lease_epoch_to_the_provider(loaded: LoadedConfig, engine: FakeEngine) -> None:
    """The root variable ``fence`` carries the epoch each plan was made under (the simulated cloud
    journals the run's mutations with it); it never enters the desired set; a dry run, whose fence
    is closed, plans with ""."""
    executor = unit_executor(loaded, engine)
    made = executor.create("sim", "cpu", 2)
    executor.return_instances("sim", [made.created[0].key], drain=DrainSettings(drain=False))
    assert engine.plan_fences and set(engine.plan_fences) == {"3.7"}
    assert "fence" not in json.loads(ProviderWorkdir(loaded.config, "sim", ROOT).desired_file.read_text())
    engine.plan_fences.clear()
    revoked = FakeFence()
    revoked.revoked = True
    dry = unit_executor(loaded, engine, fence=revoked).return_instances("sim", [made.created[1].key], dry_run=True)
    assert dry.deleted == [made.created[1].key] and engine.plan_fences == [""]


def test_a_hostile_cloud_address_is_recorded_unaddressed_and_audited(loaded: LoadedConfig, engine: FakeEngine) -> None:
    """The apply's instance record says ``10.0.0.5,*``: the instance is recorded (it exists and
    will be returned one day) with no address at the controller, and the refusal is audited."""
    hostile = "10.0.0.5,*\n* ssh-ed25519 AAAAattacker"
    engine.address_of = lambda key: hostile if key.endswith("-001") else "10.0.0.4"
    facts = MemoryFacts()
    result = unit_executor(loaded, engine, facts=facts).create("sim", "cpu", 2)
    created = {f.instance_key: f.address for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED}
    assert created == {f"{result.op_id}-000": "10.0.0.4", f"{result.op_id}-001": ""}
    assert [c.address for c in result.created] == ["10.0.0.4", ""]
    entries = [json.loads(line) for line in (loaded.config.state_dir / "audit.log").read_text().splitlines()]
    (refused,) = [e for e in entries if e["action"] == "address-refused"]
    assert refused["key"] == f"{result.op_id}-001" and repr(hostile) in refused["reason"]


def test_a_closed_fence_refuses_before_any_intent(loaded: LoadedConfig, engine: FakeEngine) -> None:
    fence, facts = FakeFence(), MemoryFacts()
    fence.revoked = True
    with pytest.raises(LeaseLost, match="stopped before intent"):
        unit_executor(loaded, engine, fence=fence, facts=facts).create("sim", "cpu", 1)
    assert facts.committed == [] and "apply" not in [c for c, _ in engine.calls]


class RevokedDuringApply(FakeFence):
    """The lease is revoked the moment Terraform starts (the apply polls ``valid``)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def valid(self, provider: str) -> bool:
        if self.armed:
            self.revoked = True
        return super().valid(provider)


def test_revocation_during_the_apply_stops_it_and_resume_completes_the_op(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    fence, facts = RevokedDuringApply(), MemoryFacts()
    executor = unit_executor(loaded, engine, fence=fence, facts=facts)
    fence.armed = True
    with pytest.raises(LeaseLost, match="resumable"):
        executor.create("sim", "cpu", 2)
    assert held(loaded) == {} and len(desired(loaded)) == 2  # nothing created after the revocation
    [still_open] = open_ops(facts.facts("sim"))
    assert (still_open.kind, still_open.done, still_open.count) == ("create", 0, 2)
    assert "op-apply-interrupted" in actions(loaded)
    fence.armed, fence.revoked = False, False  # the lease is granted again
    [done] = executor.resume("sim")
    assert (done.op_id, done.outcome) == (still_open.op_id, "completed")
    assert len(held(loaded)) == 2
    agree(facts, loaded)


def test_a_crash_after_the_apply_before_the_facts_is_completed_without_duplicates(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    facts = CrashOn(FactKind.INSTANCE_CREATED)
    executor = unit_executor(loaded, engine, facts=facts)
    with pytest.raises(KeyboardInterrupt):
        executor.create("sim", "gpu", 2)
    assert len(held(loaded)) == 2 and facts.kinds() == ["requestIntent"]
    applies = [c for c, _ in engine.calls].count("apply")
    [done] = executor.resume("sim")
    assert done.outcome == "completed"
    assert [c for c, _ in engine.calls].count("apply") == applies  # nothing re-applied: it was all there
    agree(facts, loaded)


def test_an_intent_without_a_desired_set_is_abandoned_with_its_reason(loaded: LoadedConfig, engine: FakeEngine) -> None:
    facts = MemoryFacts()
    executor = unit_executor(loaded, engine, facts=facts)
    engine.listed = {"i-of-another-op": ("running", "")}  # the listing is read and shows nothing of the op
    intent = Fact(FactKind.REQUEST_INTENT, "sim", "op-00000002-abcdef", FakeFence().epoch, template="cpu", count=2)
    facts.commit(intent)  # the crash came right after the intent
    [done] = executor.resume("sim")
    assert done.outcome == "abandoned" and "nothing was created" in done.reason
    returned = [f for f in facts.committed if f.kind == FactKind.RETURNED]
    assert len(returned) == 2 and all("abandoned" in f.detail for f in returned)
    assert "apply" not in [c for c, _ in engine.calls]
    agree(facts, loaded)


def test_resume_abandons_nothing_on_local_files_alone_when_the_listing_cannot_confirm(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    facts = MemoryFacts()
    executor = unit_executor(loaded, engine, facts=facts)
    intent = Fact(FactKind.REQUEST_INTENT, "sim", "op-00000002-abcdef", FakeFence().epoch, template="cpu", count=2)
    facts.commit(intent)
    # The module cannot list by tag: nothing confirms that the cloud holds nothing of the op.
    with pytest.raises(
        FinalError,
        match=r"op op-00000002-abcdef on provider sim: .* not recorded returned: .*"
        r"tagged listing, which must confirm that, is not supported by the module; the op stays open",
    ):
        executor.resume("sim")
    # The cloud lists an instance of the op that no state holds (a daemon applying it right now).
    engine.listed = {"i-daemons": ("pending", "")}
    engine.listed_tags = {"i-daemons": {owner.OP_ID: "op-00000002-abcdef"}}
    with pytest.raises(FinalError, match=r"not abandoned: no local file holds them but the cloud lists i-daemons"):
        executor.resume("sim")
    assert [f.kind for f in facts.committed] == [FactKind.REQUEST_INTENT]
    assert [o.op_id for o in open_ops(facts.facts("sim"))] == ["op-00000002-abcdef"]
    assert "resume-refused" in actions(loaded)


def test_a_crash_after_the_returning_intent_is_completed_by_resume(loaded: LoadedConfig, engine: FakeEngine) -> None:
    facts = MemoryFacts()
    created = unit_executor(loaded, engine, facts=facts).create("sim", "cpu", 2)
    crashing = CrashOn(FactKind.RETURNED)
    crashing.committed = facts.committed
    executor = unit_executor(loaded, engine, facts=crashing)
    with pytest.raises(KeyboardInterrupt):
        executor.return_instances("sim", [created.created[0].key])
    [still_open] = open_ops(crashing.facts("sim"))
    assert still_open.kind == "return"
    gone, kept = created.created
    # The cloud still lists the returned instance: no state holds it, yet it is not recorded returned.
    engine.listed = {gone.instance_id: ("running", ""), kept.instance_id: ("running", "")}
    with pytest.raises(FinalError, match=rf"{gone.key} \({gone.instance_id}\) not recorded returned: .*still lists"):
        executor.resume("sim")
    assert open_ops(crashing.facts("sim")) == [still_open]
    engine.listed = {kept.instance_id: ("running", "")}  # the listing confirms it is gone
    [done] = executor.resume("sim")
    assert done.outcome == "completed"
    assert sorted(held(loaded)) == [kept.key]
    agree(crashing, loaded)


def test_destroy_refuses_busy_hosts_unless_forced(loaded: LoadedConfig, engine: FakeEngine) -> None:
    facts = MemoryFacts()
    made = unit_executor(loaded, engine, facts=facts).create("sim", "cpu", 2)
    busy_key = made.created[0].key
    hosts = FakeHosts({busy_key: "busy", made.created[1].key: "idle"})
    executor = unit_executor(loaded, engine, facts=facts, hosts=hosts)
    with pytest.raises(HostBusy, match=f"h-{busy_key}: joined and running work") as refused:
        executor.return_instances("sim", [c.key for c in made.created], drain=DrainSettings(drain=False))
    assert refused.value.exit_code == 10
    assert len(held(loaded)) == 2 and FactKind.RETURNING not in facts.kinds()
    executor.return_instances("sim", [c.key for c in made.created], drain=DrainSettings(drain=False, force=True))
    assert held(loaded) == {} and facts.kinds().count("returning") == 2
    assert "op-return-forced" in actions(loaded)
    assert sorted(hosts.decommissioned) == sorted(c.key for c in made.created)
    agree(facts, loaded)


def test_return_drains_first_then_returns(loaded: LoadedConfig, engine: FakeEngine) -> None:
    facts = MemoryFacts()
    [made] = unit_executor(loaded, engine, facts=facts).create("sim", "cpu", 1).created
    hosts = FakeHosts({made.key: "busy"})
    reads: list[str] = []

    def work_ends(h: FakeHosts) -> None:
        # The controller finishes the host's work after the drain has looked twice.
        reads.append(h.states[made.key])
        if len(reads) >= 3 and h.states[made.key] == "closing":
            h.states[made.key] = "closed"

    hosts.on_read = work_ends
    executor = unit_executor(loaded, engine, facts=facts, hosts=hosts, sleep=lambda _s: None)
    result = executor.return_instances("sim", [made.key], drain=DrainSettings(timeout=3600))
    assert hosts.closed == [made.key] and result.drained == [made.key]
    assert "closing" in reads and held(loaded) == {}
    order = actions(loaded)
    assert order.index("op-drain") < order.index("op-decommission") < order.index("fact-returning")
    agree(facts, loaded)


def test_drain_timeout_with_policy_wait_returns_nothing(loaded: LoadedConfig, engine: FakeEngine) -> None:
    facts = MemoryFacts()
    [made] = unit_executor(loaded, engine, facts=facts).create("sim", "cpu", 1).created
    hosts = FakeHosts({made.key: "busy"})
    clock = iter(range(0, 10_000, 10))
    executor = unit_executor(
        loaded, engine, facts=facts, hosts=hosts, sleep=lambda _s: None, clock=lambda: float(next(clock))
    )
    with pytest.raises(RetryableError, match="still running work after the drain timeout"):
        executor.return_instances("sim", [made.key], drain=DrainSettings(timeout=30, policy="wait"))
    assert len(held(loaded)) == 1 and "returning" not in facts.kinds()
    result = executor.return_instances("sim", [made.key], drain=DrainSettings(timeout=30, policy="return"))
    assert result.deleted == [made.key] and held(loaded) == {}
    assert actions(loaded).count("op-drain-timeout") == 2
    # Still running at the timeout: returned anyway only because the policy says so (forced).
    assert hosts.forced == [made.key]


@dataclasses.dataclass
class LostOne:
    instance_key: str
    instance_id: str
    reason: str = "spot-reclaim"
    evidence: dict[str, Any] = dataclasses.field(default_factory=lambda: {"state_reason": "spot-reclaim"})


def test_a_lost_host_gets_a_lost_fact_and_is_never_recreated(loaded: LoadedConfig, engine: FakeEngine) -> None:
    facts = MemoryFacts()
    first = unit_executor(loaded, engine, facts=facts).create("sim", "cpu", 2)
    gone = first.created[0]
    wd = ProviderWorkdir(loaded.config, "sim", ROOT)
    FakeEngine.vanish(wd.path, gone.key)  # reclaimed by the cloud behind our back

    class Observer:
        """Judges ``gone`` lost once asked; records what the op's plan showed."""

        def __init__(self) -> None:
            self.recorded: list[Drift] = []

        def record(self, plan: PlanResult) -> Drift:
            self.recorded.append(drift_from_stream(plan, lambda: {gone.key: gone.instance_id}))
            return self.recorded[-1]

        def observe(self) -> Sequence[LostOne]:
            return [LostOne(gone.key, gone.instance_id)]

    observer = Observer()
    executor = unit_executor(loaded, engine, facts=facts, losses=lambda _e, _p: observer)
    second = executor.create("sim", "cpu", 1)
    # The op's own plan saw the deletion (its refresh), which sent the op down the loss path.
    assert [d.deleted for d in observer.recorded] == [{gone.key: gone.instance_id}]
    [lost] = [f for f in facts.committed if f.kind == FactKind.LOST]
    assert (lost.instance_key, lost.op_id, json.loads(lost.detail)["reason"]) == (gone.key, first.op_id, "spot-reclaim")
    assert gone.key not in desired(loaded) and gone.key not in held(loaded)
    assert sorted(held(loaded)) == sorted([first.created[1].key, second.created[0].key])
    agree(facts, loaded)


def test_record_created_refuses_when_terraform_holds_nothing(loaded: LoadedConfig, engine: FakeEngine) -> None:
    # The create op's own step, on collaborators built as the executor builds them.
    parts = unit_parts(loaded, engine)
    shardset = ShardSet(parts)
    creates = CreateOp(parts, shardset, TerraformSteps(parts, shardset), LossPath(parts))
    wd = shardset.workdir("sim")
    with pytest.raises(FinalError, match="Terraform holds no instance for op-x-000"):
        creates.record_created("sim", wd, "op-x", "cpu", ["op-x-000"])
