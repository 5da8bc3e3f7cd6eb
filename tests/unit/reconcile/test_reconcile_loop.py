"""The pass's phases through a fake Terraform engine and an in-memory controller, on a fake clock.

What a user would notice: a pass that cannot read the controller changes nothing (every later
phase skipped, said once in the audit log); a phase that fails is audited by name and the next
phases still run; the gap is asked for once; a reload forgets provider failures.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from reconcile_support import FakeClock
from tffake import SITE, FakeEngine, FakeFence, FakeHosts, FakeView, MemoryFacts, StampedFacts, site_config, unit_ops

from orchestrator.clients.controller.types import Fact
from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.errors import ControllerError, LeaseLost
from orchestrator.model.backoff import Backoff
from orchestrator.model.facts import Epoch, FactKind
from orchestrator.model.firstboot import STARTED_OUTCOME
from orchestrator.ops.executor import Created
from orchestrator.ops.openops import open_ops
from orchestrator.reconcile.bootstraps import BootstrapTracker
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.classify import Classification, FailureClass
from orchestrator.reconcile.loop import PHASES, Reconciler
from orchestrator.reconcile.results import ResumeResult, ScaleOutResult


@pytest.fixture
def loaded(tmp_path: Path) -> LoadedConfig:
    return site_config(tmp_path)


def build(
    loaded: LoadedConfig,
    engine: FakeEngine,
    bootstrap: object = None,
    fence: FakeFence | None = None,
    stamped: bool = False,
) -> tuple[Reconciler, FakeView, MemoryFacts, FakeClock]:
    hosts, clock = FakeHosts(), FakeClock()
    facts = StampedFacts(lambda: clock.now) if stamped else MemoryFacts()
    ops = unit_ops(loaded, engine, facts=facts, hosts=hosts, clock=lambda: clock.now, fence=fence or FakeFence())
    view = FakeView(facts, hosts)
    reconciler = Reconciler(
        loaded.config,
        ops,
        view,
        clock=lambda: clock.now,
        state_dir=loaded.config.state_dir,
        bootstrap=bootstrap,  # type: ignore[arg-type]
    )
    return reconciler, view, facts, clock


def audited(loaded: LoadedConfig) -> list[dict[str, object]]:
    path = loaded.config.state_dir / "audit.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_pass_that_cannot_read_changes_nothing_and_says_so_once(loaded: LoadedConfig) -> None:
    engine = FakeEngine()
    reconciler, view, facts, _clock = build(loaded, engine)
    view.want(cpu=3)
    view.up = False
    first, second = reconciler.run_once(), reconciler.run_once()
    for report in (first, second):
        assert [p.name for p in report.phases] == list(PHASES)
        assert report.phase("read").error == "controller not connected"
        assert all(p.skipped == "read failed: controller not connected" for p in report.phases[1:])
        assert report.ops == [] and not report.ok
    assert facts.committed == [] and engine.calls == []
    view.up = True
    view.hosts_error = ControllerError("hostStatus timed out")
    assert reconciler.run_once().phase("read").error == "ControllerError: hostStatus timed out"
    view.hosts_error = None
    assert reconciler.run_once().ok
    assert [e["action"] for e in audited(loaded) if str(e["action"]).startswith("reconcile-read")] == [
        "reconcile-read-failed",
        "reconcile-read-failed",
        "reconcile-read-ok",
    ]


def test_no_snapshot_yet_skips_every_later_phase(loaded: LoadedConfig) -> None:
    reconciler, _view, facts, _clock = build(loaded, FakeEngine())
    report = reconciler.run_once("start")
    assert report.phase("read").error == "no demand snapshot from the controller yet"
    assert {p.skipped for p in report.phases[1:]} == {"read failed: no demand snapshot from the controller yet"}
    assert facts.committed == []


def test_a_failing_phase_is_audited_and_the_later_phases_still_run(loaded: LoadedConfig, tmp_path: Path) -> None:
    booted: list[list[str]] = []

    def bootstrap(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        booted.append([c.name for c in created])
        return {c.name: "ok" for c in created}

    engine = FakeEngine(fail_init=True)  # every Terraform working directory fails to initialise
    reconciler, view, facts, clock = build(loaded, engine, bootstrap)
    # A host created earlier (its facts are at the controller) and still to be bootstrapped.
    epoch = Epoch(3, 7)
    facts.commit(Fact(FactKind.REQUEST_INTENT, "sim", "op-1", epoch, template="cpu", count=1))
    common = {"instance_key": "op-1-000", "instance_id": "i-1", "template": "cpu", "host_name": "h1"}
    facts.commit(Fact(FactKind.INSTANCE_CREATED, "sim", "op-1", epoch, **common))
    facts.commit(Fact(FactKind.EXPECTED_HOST, "sim", "op-1", epoch, join_deadline=clock.now + 900, **common))
    view.want(cpu=1)
    report = reconciler.run_once()
    resume = report.phase("resume")
    assert not resume.ok and "Failed to query available provider packages" in resume.error
    assert [p.name for p in report.phases if p.ok] == ["read", "scale-out", "bootstrap", "join-tracking", "reclaim"]
    assert booted == [["h1"]]  # the bootstrap phase ran after the resume phase failed
    [entry] = [e for e in audited(loaded) if e["action"] == "phase-failed"]
    assert entry["phase"] == "resume" and "Failed to query" in str(entry["error"])


def test_the_gap_is_asked_for_once_over_many_passes(loaded: LoadedConfig) -> None:
    reconciler, view, facts, clock = build(loaded, FakeEngine())
    view.want(cpu=3, gpu=1)
    reports = []
    for _ in range(5):
        reports.append(reconciler.run_once())
        clock.advance(60)  # past the cooldown: only the gap stops new requests
    assert len(reports[0].ops) == 2 and all(r.ops == [] for r in reports[1:])
    created = [f for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED]
    assert sorted(f.template for f in created) == ["cpu", "cpu", "cpu", "gpu"]
    assert reports[0].gaps["cpu"].gap == 3 and reports[-1].gaps["cpu"].gap == 0
    assert {d.outcome for d in reports[-1].decisions} == {"no-gap"}
    # What the daemon writes to its status file: plain JSON, the numbers of the decision in it.
    doc = json.loads(json.dumps(reports[0].to_json(), allow_nan=False))
    assert doc["ops"] == reports[0].ops and doc["ok"] is True
    assert [p["name"] for p in doc["phases"]] == list(PHASES)
    assert {d["template"]: d["outcome"] for d in doc["decisions"]} == {"cpu": "ops", "gpu": "ops"}


def test_a_reload_forgets_provider_failures(loaded: LoadedConfig) -> None:
    reconciler, _view, _facts, clock = build(loaded, FakeEngine())
    refused = Classification(FailureClass.PERMANENT, "InvalidParameterValue", "bad image")
    reconciler.health.failed("sim", "cpu", refused, clock.now)
    assert reconciler.health.blocked("sim", "cpu", clock.now) is not None
    # The pass's report says so (the daemon's status file and xceprov_provider_backoff).
    [blocked] = reconciler.run_once().to_json()["blocked"]
    assert (blocked["provider"], blocked["template"], blocked["class"], blocked["until"]) == (
        "sim",
        "cpu",
        "permanent",
        None,
    )
    reconciler.reload(loaded.config)
    assert reconciler.health.blocked("sim", "cpu", clock.now) is None
    assert reconciler.run_once().to_json()["blocked"] == []
    assert "reconcile-reload" in [e["action"] for e in audited(loaded)]


def test_a_breaker_reset_by_another_process_is_honoured_by_the_next_pass(loaded: LoadedConfig) -> None:
    reconciler, view, _facts, clock = build(loaded, FakeEngine())
    view.want(cpu=1)
    for _ in range(loaded.config.policy.breaker.failures):
        reconciler.breakers.failure("cpu", "join", "never joined", clock.now)
    assert {d.template: d.outcome for d in reconciler.run_once().decisions} == {"cpu": "breaker-open"}
    # `xceprov breaker reset cpu`, in its own process: only the file is shared.
    Breakers.load(loaded.config.state_dir, loaded.config.policy.breaker).reset("cpu")
    report = reconciler.run_once()
    assert {d.template: d.outcome for d in report.decisions} == {"cpu": "ops"} and len(report.ops) == 1


def test_bootstrap_records_another_orchestrator_wrote_are_read_by_the_next_pass(loaded: LoadedConfig) -> None:
    """A provider taken over arrives with its previous holder's records (the shared store's, or
    here the state directory's file): a host that one bootstrapped is not bootstrapped again."""
    booted: list[list[str]] = []

    def bootstrap(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        booted.append([c.name for c in created])
        return {c.name: "ok" for c in created}

    reconciler, view, facts, clock = build(loaded, FakeEngine(), bootstrap)
    view.want(cpu=1)  # the host below is the one wanted: no op
    epoch = Epoch(3, 7)
    facts.commit(Fact(FactKind.REQUEST_INTENT, "sim", "op-1", epoch, template="cpu", count=1))
    common = {"instance_key": "op-1-000", "instance_id": "i-1", "template": "cpu", "host_name": "h1"}
    facts.commit(Fact(FactKind.INSTANCE_CREATED, "sim", "op-1", epoch, **common))
    facts.commit(Fact(FactKind.EXPECTED_HOST, "sim", "op-1", epoch, join_deadline=clock.now + 900, **common))
    other = BootstrapTracker.load(loaded.config.state_dir)  # written after this orchestrator started
    record = other.get("op-1-000", "sim", "cpu", "h1")
    other.record(record, "ok", clock.now, attempts=3, backoff=Backoff(), rng=random.Random(1))
    report = reconciler.run_once()
    assert report.phase("bootstrap").ok
    assert booted == []


def test_a_first_boot_host_started_at_creation_counts_as_bootstrapped(loaded: LoadedConfig) -> None:
    """A first-boot host's outcome ("started", no play ran) is a bootstrap done: the next pass
    does not try it again; its join decides (issue 30, the first-boot join)."""
    booted: list[list[str]] = []

    def bootstrap(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        booted.append([c.name for c in created])
        return {c.name: STARTED_OUTCOME for c in created}

    reconciler, view, facts, clock = build(loaded, FakeEngine(), bootstrap)
    view.want(cpu=1)
    epoch = Epoch(3, 7)
    facts.commit(Fact(FactKind.REQUEST_INTENT, "sim", "op-1", epoch, template="cpu", count=1))
    common = {"instance_key": "op-1-000", "instance_id": "i-1", "template": "cpu", "host_name": "h1"}
    facts.commit(Fact(FactKind.INSTANCE_CREATED, "sim", "op-1", epoch, **common))
    facts.commit(Fact(FactKind.EXPECTED_HOST, "sim", "op-1", epoch, join_deadline=clock.now + 900, **common))
    assert reconciler.run_once().phase("bootstrap").ok
    assert reconciler.run_once().phase("bootstrap").ok
    assert booted == [["h1"]]
    record = BootstrapTracker.load(loaded.config.state_dir).get("op-1-000", "sim", "cpu", "h1")
    assert (record.outcome, record.attempts, record.gave_up) == ("ok", 1, False)


class GrantedAfterRead(FakeFence):
    """A lease not held when the pass reads its inputs, granted right after (a takeover mid-pass)."""

    def __init__(self) -> None:
        super().__init__()
        self.granted = False
        self.polls = 0

    def valid(self, provider: str) -> bool:
        self.polls += 1
        held, self.granted = self.granted, True  # the read's poll says no; the grant lands after it
        return held

    def gate(self, provider: str) -> Epoch:
        if not self.granted:
            raise LeaseLost(f"no lease for provider {provider!r}")
        return self.epoch


def test_an_op_left_open_on_a_provider_whose_lease_comes_during_the_pass_is_resumed_in_that_pass(
    loaded: LoadedConfig,
) -> None:
    engine, facts, hosts, clock = FakeEngine(), MemoryFacts(), FakeHosts(), FakeClock()
    fence = GrantedAfterRead()
    ops = unit_ops(loaded, engine, facts=facts, hosts=hosts, fence=fence, clock=lambda: clock.now)
    fence.granted = True
    keys = ops.executor.place("sim", "cpu", 2, "op-6b49d200-0123456789ab")  # the previous holder's op, left open
    fence.granted = False
    view = FakeView(facts, hosts)
    view.want(cpu=0)  # nothing more wanted: only the resume creates
    reconciler = Reconciler(loaded.config, ops, view, clock=lambda: clock.now, state_dir=loaded.config.state_dir)
    report = reconciler.run_once("interval")
    assert report.leased == ["sim"]
    # The pass's own resume (nothing leased at its read) and the one beside it, for the lease gained.
    resumes = [p.evidence for p in report.phases if p.name == "resume" and isinstance(p.evidence, ResumeResult)]
    own = [r for r in resumes if not r.gained]
    beside = [r for r in resumes if list(r.gained) == ["sim"]]
    assert len(own) == 1 and own[0].resumed == []
    assert len(beside) == 1 and [r.op for r in beside[0].resumed] == ["op-6b49d200-0123456789ab"]
    created = {f.instance_key for f in facts.facts("sim") if f.kind == FactKind.INSTANCE_CREATED}
    assert created == set(keys)  # made by this pass, not the next one
    assert open_ops(facts.facts("sim")) == []


def test_the_pass_takes_the_warm_pool_first_refills_it_after_and_returns_its_surplus(tmp_path: Path) -> None:
    text = SITE.format(cluster="unit", state=tmp_path / "state")
    pooled = parse_config(text.replace("cost_per_hour: 0.5}", "cost_per_hour: 0.5, warm_pool: 2}"), "x.yaml", tmp_path)
    reconciler, view, facts, clock = build(pooled, FakeEngine(), stamped=True)
    view.want()
    first = reconciler.run_once().result("scale-out", ScaleOutResult)
    assert ([o.count for o in first.pooled], first.created, first.started) == ([2], [], [])
    pool = [f.instance_key for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED]
    assert not [f for f in facts.committed if f.kind == FactKind.EXPECTED_HOST]
    clock.advance(1)
    view.want(cpu=3)
    # Taken at the controller's time: the hosts started after it are counted as unreflected.
    view.snapshot = replace(view.snapshot, time=clock.now) if view.snapshot else None
    clock.advance(1)
    second = reconciler.run_once().result("scale-out", ScaleOutResult)
    assert [(o.count, o.template) for o in second.started] == [(2, "cpu")]
    assert [o.count for o in second.created] == [1] and [o.count for o in second.pooled] == [2]
    expected = {f.instance_key: f.op_id for f in facts.committed if f.kind == FactKind.EXPECTED_HOST}
    assert set(pool) <= set(expected) and len(expected) == 3
    assert {expected[k] for k in pool} == {second.started[0].op}
    order = [str(e["action"]) for e in audited(pooled)]
    assert (
        order.index("reconcile-pool-take")
        < order.index("op-start")
        < order.index("op-created", order.index("op-start"))
    )
    created_at = order.index("op-created", order.index("op-start"))
    assert created_at < order.index("reconcile-pool-refill", order.index("op-start"))
    # warm_pool lowered to 0 at a reload: the two waiting are returned (fenced, returning first).
    clock.advance(1)
    reconciler.reload(parse_config(text, "x.yaml", tmp_path).config)
    third = reconciler.run_once().result("scale-out", ScaleOutResult)
    refill = [f.instance_key for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED][3:]
    assert sorted(third.pool_returned) == sorted(refill) and not third.pooled
    returned = {f.instance_key for f in facts.committed if f.kind == FactKind.RETURNED}
    assert returned == set(refill) and open_ops(facts.facts("sim")) == []


def test_a_quota_refused_for_many_passes_is_asked_once_per_hold_and_nothing_is_deleted(
    loaded: LoadedConfig,
) -> None:
    """No create/delete loop (issue 31): after the first quota refusal, no create goes out until
    the hold ends, and no instance is deleted; the hold is in the pass's report and the memory."""
    engine = FakeEngine()
    reconciler, view, facts, clock = build(loaded, engine, stamped=True)
    view.want(cpu=1)
    reconciler.run_once()  # one host made before the quota was reached
    engine.refuse_creates = "InstanceLimitExceeded: Your quota allows for 0 more running instance(s)"
    view.want(cpu=4)
    clock.advance(60)
    first = reconciler.run_once()
    [refused] = first.refused
    assert (refused.scope, refused.provider) == ("quota", "sim")
    assert first.to_json()["refused"] == [{"scope": "quota", "provider": "sim", "placement": ""}]
    applies = len([c for c in engine.calls if c[0] == "apply"])
    until = reconciler.refusals.quota("sim", clock.now)
    assert until is not None and until - clock.now >= loaded.config.policy.quota_backoff.base / 2 - 60
    passes = 0
    while clock.now + 30 < until:
        clock.advance(30)
        report = reconciler.run_once()
        assert report.ops == [] and report.refused == []
        passes += 1
    assert passes >= 8
    assert len([c for c in engine.calls if c[0] == "apply"]) == applies  # no create (nor delete) went out
    created = {f.instance_key for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED}
    gone = {f.instance_key for f in facts.committed if f.kind in (FactKind.RETURNED, FactKind.LOST)}
    assert len(created) == 1 and not created & gone  # the one host was never deleted
    decision = next(d for d in report.decisions if d.template == "cpu")
    assert decision.evidence["providers"][0]["skipped"] == "quota"
    # Once the hold ends, one probe; the quota still refuses: held again, longer.
    clock.advance(until - clock.now)
    probe = reconciler.run_once()
    assert len(probe.ops) == 1 and [r.failures for r in probe.refused] == [2]
    # A restarted daemon (a new reconciler over the same state directory) holds it too.
    restarted, *_ = build(loaded, FakeEngine())
    assert restarted.refusals.quota("sim", clock.now) == reconciler.refusals.quota("sim", clock.now) is not None
