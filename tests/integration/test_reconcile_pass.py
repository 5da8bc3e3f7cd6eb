"""The reconcile pass against the real simulated world (controller process, cloud behind Terraform).

Each test drives ``Reconciler.run_once`` pass by pass on a clock it moves, injects the fault of
the issue's list ("Faults that must be tested") from outside (the simulated cloud's fault
controls, the controller's admin socket), and ends with the cloud and the facts in exact
agreement: no open op, no duplicate, no leak.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from reconcile_world import World, agree, reconcile_world
from sim_world_helpers import wait_until

from orchestrator.model.facts import FactKind
from orchestrator.ops.executor import Created
from orchestrator.ops.openops import open_ops
from orchestrator.reconcile.loop import PassReport
from orchestrator.reconcile.results import BootstrapResult, JoinResult, ReclaimResult, ScaleOutResult
from orchestrator.sim.controller import admin

pytestmark = pytest.mark.integration

FAST_RETRY = {"retry": {"base": 1, "max": 2, "attempts": 3}, "cooldown": 0}
# At 30 % errors a transient failure is retried in place; passed over only after many in a row.
PATIENT = {**FAST_RETRY, "retry": {"base": 1, "max": 2, "attempts": 8}}


def in_thread(world: World) -> Future[PassReport]:
    pool = ThreadPoolExecutor(max_workers=1)
    future = pool.submit(world.reconciler.run_once, "demand")
    pool.shutdown(wait=False)
    return future


def settle(world: World, wanted: int, passes: int, step: float = 5.0) -> list[PassReport]:
    """Passes (the clock moving ``step`` each) until the cloud holds ``wanted`` and no op is open."""
    reports: list[PassReport] = []
    for _ in range(passes):
        reports.append(world.reconciler.run_once())
        facts = world.facts()
        if (
            len(world.alive()) == wanted
            and not open_ops(facts)
            and "cpu" in reports[-1].gaps
            and reports[-1].gaps["cpu"].gap == 0
        ):
            return reports
        world.clock.advance(step)
    raise AssertionError(f"not settled after {passes} passes: {[r.to_json() for r in reports[-3:]]}")


def actions(world: World) -> list[str]:
    return [e["action"] for e in world.audit()]


def test_steady_demand_creates_exactly_the_missing_hosts(tmp_path: Path) -> None:
    with reconcile_world(tmp_path) as world:
        admin.submit(world.ctl_state, "cpu", 3, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 3)
        reports = world.passes(6)
        assert len(agree(world)) == 3
        created = [op for r in reports for op in r.ops]
        assert len(created) == 1, [r.to_json() for r in reports]
        assert reports[0].gaps["cpu"].gap == 3
        assert all(r.ok for r in reports), [p for r in reports for p in r.phases if not p.ok]
        assert reports[-1].gaps["cpu"].gap == 0
        # Steady: the hosts asked for are counted (in flight at the controller) in every later pass.
        assert {r.gaps["cpu"].in_flight + r.gaps["cpu"].unreflected for r in reports[1:]} == {3}


def test_demand_that_falls_mid_op_does_not_cancel_it(tmp_path: Path) -> None:
    with reconcile_world(tmp_path) as world:
        admin.submit(world.ctl_state, "cpu", 2, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 2)
        world.store.set_slow_launch(1.0)
        running = in_thread(world)
        wait_until("the apply", lambda: "op-apply" in actions(world))
        # Two static workers take the work: demand falls to nothing while the op runs.
        for n in (1, 2):
            world.join(Created(f"static-{n}", f"i-static-{n}", f"static-{n}", "", "cpu", 0.0))
        world.wait_demand(lambda wanted: wanted.get("cpu", 0) == 0)
        first = running.result(timeout=120)
        world.store.set_slow_launch(0.0)
        assert first.phase("scale-out").ok, first.to_json()
        later = world.passes(3)
        assert len(agree(world)) == 2  # the op finished: both hosts exist, none cancelled
        assert [op for r in later for op in r.ops] == []
        assert later[-1].gaps["cpu"].surplus == 2


def test_cloud_api_errors_at_30_percent_end_in_exactly_the_demand(tmp_path: Path) -> None:
    with reconcile_world(tmp_path, policy=PATIENT) as world:
        admin.submit(world.ctl_state, "cpu", 2, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 2)
        world.store.set_error_rate(0.3, seed=11)
        reports = settle(world, 2, passes=40)
        failures = [e for e in world.audit() if e["action"] == "reconcile-op-failed"]
        assert failures, "the error rate never hit a create"
        assert all(e["failure"]["class"] == "transient" for e in failures)
        world.store.set_error_rate(0.0)
        assert len(agree(world)) == 2
        assert reports[-1].gaps["cpu"].gap == 0


TWO_PROVIDERS = {
    "sim": {"module": "xcesim", "max_instances": 20, "priority": 20},
    "sim2": {"module": "xcesim", "max_instances": 20, "priority": 10},
}
CPU_ON_BOTH = {
    "cpu": {
        "providers": {
            "sim": {"flavor": "c8.large", "image": "debian-12"},
            "sim2": {"flavor": "c4.large", "image": "debian-12"},
        }
    }
}


def test_capacity_exhausted_on_the_first_provider_falls_back_by_priority(tmp_path: Path) -> None:
    with reconcile_world(tmp_path, providers=TWO_PROVIDERS, templates=CPU_ON_BOTH, policy=FAST_RETRY) as world:
        world.store.set_capacity("c8.large", 0)
        admin.submit(world.ctl_state, "cpu", 3, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 3)
        [report] = world.passes(1)
        alive = agree(world)
        assert sorted(i.flavor for i in alive.values()) == ["c4.large"] * 3
        [failed] = report.result("scale-out", ScaleOutResult).failed
        assert failed.provider == "sim" and failed.closed is True
        [created] = report.result("scale-out", ScaleOutResult).created
        assert created.provider == "sim2" and created.count == 3
        [entry] = [e for e in world.audit() if e["action"] == "reconcile-op-failed"]
        assert entry["failure"]["class"] == "capacity" and entry["decision"] == "abandon"
        # The memory of refusals holds the refused flavor on sim (not the provider: sim2 serves).
        [held] = report.refused
        assert (held.scope, held.provider, held.placement) == ("capacity", "sim", "c8.large")
        assert world.reconciler.refusals.capacity("sim", "c8.large", held.last) == held.until
        # Steady afterwards: nothing more is asked of either provider.
        assert [op for r in world.passes(2) for op in r.ops] == []


def test_a_quota_reached_for_ten_minutes_is_probed_once_per_hold_and_deletes_nothing(tmp_path: Path) -> None:
    """Issue 31: the account's quota (1 instance) is reached for 10 minutes of passes, one a
    minute: no create request goes out while the quota is held (one probe when a hold ends, each
    hold longer), nothing is deleted, and the memory of refusals names it as quota."""
    with reconcile_world(tmp_path, policy=FAST_RETRY) as world:
        world.store.set_quota(1)
        admin.submit(world.ctl_state, "cpu", 3, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 3)
        reports = []
        for _ in range(10):
            reports += world.passes(1)
            world.clock.advance(60)
        held_until = None
        holds = []
        for report in reports:
            if report.ops:  # only when no hold stands at the pass's start
                assert held_until is None or report.started >= held_until, report.to_json()["decisions"]
            for refusal in report.refused:
                assert (refusal.scope, refusal.provider, refusal.placement) == ("quota", "sim", "")
                held_until = refusal.until
                holds.append(refusal)
        assert [h.failures for h in holds] == list(range(1, len(holds) + 1)) and len(holds) <= 2
        assert holds[0].until - holds[0].last >= 300  # policy.quota_backoff: 10 min, at least half
        requests = world.store.requests()
        assert {r.action for r in requests} == {"create"}  # nothing deleted
        ops = {r.client_token.rsplit("-", 1)[0] for r in requests}
        assert len(ops) == len(holds)  # one create op per hold: the first, then one probe
        assert len(world.alive()) == 1 and not open_ops(world.facts())


def test_a_create_refused_half_way_keeps_what_it_made_and_falls_back_for_the_rest(tmp_path: Path) -> None:
    """Room for 2 of 4 on the first provider: the 2 it launched are kept (a failed apply writes
    no outputs; the close reads the state itself), the other 2 come from the next provider."""
    with reconcile_world(tmp_path, providers=TWO_PROVIDERS, templates=CPU_ON_BOTH, policy=FAST_RETRY) as world:
        world.store.set_capacity("c8.large", 2)
        admin.submit(world.ctl_state, "cpu", 4, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 4)
        world.passes(1)
        alive = agree(world)
        assert sorted(i.flavor for i in alive.values()) == ["c4.large", "c4.large", "c8.large", "c8.large"]
        # Nothing the first provider launched was terminated to be made again elsewhere.
        assert not [i for i in world.store.list_instances(include_terminated=True) if i.state == "terminated"]
        [closed] = [e for e in world.audit() if e["action"] == "reconcile-op-closed"]
        assert len(closed["recorded"]) == 2 and len(closed["dropped"]) == 2


def test_a_lease_lost_mid_op_stops_creates_and_the_next_pass_finishes(tmp_path: Path) -> None:
    with reconcile_world(tmp_path, terraform={"parallelism": 1}) as world:
        admin.submit(world.ctl_state, "cpu", 3, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 3)
        world.store.set_slow_launch(1.0)
        running = in_thread(world)
        wait_until("the first instance", lambda: len(world.alive()) >= 1)
        admin.revoke(world.ctl_state, "sim", "test")
        at_revocation = len(world.alive())
        report = running.result(timeout=120)
        after = len(world.alive())
        assert after <= at_revocation + 1 and after < 3  # the create in flight may finish; none after
        assert not report.phase("scale-out").ok and "lease" in report.phase("scale-out").error
        [op] = open_ops(world.facts())  # resumable
        assert "op-apply-interrupted" in actions(world)
        world.store.set_slow_launch(0.0)
        world.wait_lease("sim")
        resumed = world.passes(3)
        assert [r.op for r in resumed[0].phase("resume").evidence.resumed] == [op.op_id]
        assert len(agree(world)) == 3
        assert [o for r in resumed for o in r.ops] == []  # finished by resume, not asked again


def failing_bootstrap(calls: list[list[str]]) -> Callable[[str, Sequence[Created]], Mapping[str, str]]:
    def bootstrap(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        calls.append([c.name for c in created])
        return {c.name: "failed: ssh: connect to host port 22: Connection refused" for c in created}

    return bootstrap


def host_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    """The log's lines about hosts (level, message), as the daemon writes them at INFO."""
    return [
        (r.levelname, r.getMessage())
        for r in caplog.records
        if r.name == "orchestrator.reconcile.hostphases" and r.getMessage().startswith(("host ", "reclaim: host"))
    ]


def test_a_bootstrap_failing_on_every_host_opens_the_breaker_and_returns_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    calls: list[list[str]] = []
    policy = {**FAST_RETRY, "retry": {"base": 1, "max": 2, "attempts": 2}, "breaker": {"failures": 2}}
    with reconcile_world(tmp_path, bootstrap=failing_bootstrap(calls), policy=policy) as world:
        admin.submit(world.ctl_state, "cpu", 2, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 2)
        reports: list[PassReport] = []
        for _ in range(5):
            reports.append(world.reconciler.run_once())
            world.clock.advance(5)
        assert len(agree(world)) == 0  # every host returned
        assert [len(c) for c in calls] == [2, 2]  # two attempts each, then given up
        breakers = json.loads((world.site / "state" / "breakers.json").read_text())["breakers"]
        assert breakers["cpu"]["position"] == "open"
        opened = next(i for i, r in enumerate(reports) if r.result("bootstrap", BootstrapResult).breakers)
        assert [op for r in reports[opened + 1 :] for op in r.ops] == []  # no more requests
        assert {d.outcome for r in reports[opened + 1 :] for d in r.decisions} == {"breaker-open"}
        assert "reconcile-bootstrap-gave-up" in actions(world)
        records = json.loads((world.site / "state" / "bootstrap.json").read_text())["hosts"]
        assert records == {}  # returned hosts are forgotten
        # The log has a line per host and attempt, with what comes next and the play's text.
        failed = [text for level, text in host_lines(caplog) if level == "WARNING"]
        assert len(failed) == 4 and all(" bootstrap failed (attempt " in text for text in failed)
        assert sum("attempt 2 of 2, next: give-up" in text for text in failed) == 2, failed


def test_the_budget_cap_holds_under_retries(tmp_path: Path) -> None:
    templates = {"cpu": {"providers": {"sim": {"flavor": "c8.large", "image": "debian-12", "cost_per_hour": 1.0}}}}
    policy = {**PATIENT, "budget_per_hour": 2.5}
    with reconcile_world(tmp_path, templates=templates, policy=policy) as world:
        admin.submit(world.ctl_state, "cpu", 3, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 3)
        world.store.set_error_rate(0.3, seed=5)
        peak = 0
        for _ in range(25):
            report = world.reconciler.run_once()
            peak = max(peak, len(world.alive()))
            if len(world.alive()) == 2 and not open_ops(world.facts()):
                break
            world.clock.advance(5)
        world.store.set_error_rate(0.0)
        assert "reconcile-op-failed" in actions(world)  # creates failed and were retried
        assert peak <= 2
        # Every op ever asked for fits the budget: retries reuse the keys already counted. An op
        # whose plan failed before its desired set was written created nothing and is abandoned
        # (its keys recorded returned as such); only then is a new op asked for.
        facts = world.facts()
        abandoned = {f.op_id for f in facts if f.kind == FactKind.RETURNED and "abandoned" in f.detail}
        intents = [f for f in facts if f.kind == FactKind.REQUEST_INTENT and f.op_id not in abandoned]
        assert sum(f.count for f in intents) == 2, facts
        assert len(agree(world)) == 2
        # At the cap, the next pass asks for nothing, and says the cluster budget is why (the pass
        # that reached the cap may itself have launched, depending on which reads the errors hit).
        report = world.reconciler.run_once()
        assert report.ops == []
        [decision] = [d for d in report.decisions if d.template == "cpu"]
        assert decision.outcome == "no-room"
        assert decision.evidence["providers"][0]["room"]["limit"] == "cluster budget"


def test_a_controller_failover_during_a_burst_ends_in_agreement(tmp_path: Path) -> None:
    with reconcile_world(tmp_path, policy=FAST_RETRY, terraform={"parallelism": 1}) as world:
        admin.submit(world.ctl_state, "cpu", 4, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 4)
        world.store.set_slow_launch(0.7)
        running = in_thread(world)
        wait_until("the first instance", lambda: len(world.alive()) >= 1)
        admin.failover(world.ctl_state)
        running.result(timeout=120)
        world.store.set_slow_launch(0.0)
        assert world.link.wait_connected(30)
        # The work was pending in the controller's memory: it survives the failover there.
        world.wait_demand(lambda wanted: wanted.get("cpu") == 4, timeout=30)
        world.wait_lease("sim")
        for _ in range(10):
            world.reconciler.run_once()
            if not open_ops(world.facts()) and len(world.alive()) >= 4:
                break
            world.clock.advance(5)
        alive = agree(world)
        assert len(alive) == 4


class BusyBetweenReadAndClose:
    """The real view, but work arrives right after the pass read the hosts (before the close)."""

    def __init__(self, world: World, inner: Any) -> None:
        self.world, self.inner, self.armed = world, inner, False

    def demand(self) -> Any:
        return self.inner.demand()

    def facts(self, provider: str) -> Any:
        return self.inner.facts(provider)

    def connected(self) -> bool:
        return bool(self.inner.connected())

    def hosts(self) -> Any:
        hosts = self.inner.hosts()
        if self.armed:
            self.armed = False
            admin.submit(self.world.ctl_state, "cpu", 1, 2.0)
        return hosts


def test_bootstrap_join_and_idle_reclaim_keep_a_host_that_turned_busy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    holder: list[World] = []

    def join_them(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        for c in created:
            holder[0].join(c)
        return {c.name: "ok" for c in created}

    providers = {"sim": {"module": "xcesim", "max_instances": 20, "idle_time": 60, "hold_time": 120}}
    with reconcile_world(tmp_path, providers=providers, bootstrap=join_them, policy=FAST_RETRY) as world:
        holder.append(world)
        admin.submit(world.ctl_state, "cpu", 2, 1.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 2)
        [first] = world.passes(1)
        assert first.result("bootstrap", BootstrapResult).hosts and len(world.alive()) == 2
        states = lambda: {h.instance_key: h.state for h in world.link.host_status(provider="sim")}  # noqa: E731
        wait_until("the work ran and ended", lambda: sorted(states().values()) == ["idle", "idle"], timeout=30)
        [second] = world.passes(1)
        assert len(second.result("join-tracking", JoinResult).joined) == 2
        assert second.reclaim_candidates == []  # idle, but not yet past idle_time and hold_time
        world.clock.advance(180)
        view = BusyBetweenReadAndClose(world, world.reconciler.controller)
        world.reconciler.controller = view
        view.armed = True
        [third] = world.passes(1)
        assert len(third.reclaim_candidates) == 2
        kept = third.result("reclaim", ReclaimResult).kept
        assert len(kept) == 1 and "closing" in kept[0].why
        assert len(third.result("reclaim", ReclaimResult).returned) == 1
        busy_key = kept[0].key
        assert set(world.alive()) == {busy_key}  # kept: its work ran on (closing, then closed)
        wait_until("the kept host's work ended", lambda: states().get(busy_key) == "closed", timeout=30)
        [fourth] = world.passes(1)
        assert fourth.result("reclaim", ReclaimResult).returned == [busy_key]
        assert agree(world) == {}
        returned = [e for e in world.audit() if e["action"] == "reconcile-reclaim" and e["op"]]
        assert [r["reason"] for e in returned for r in e["returned"]] == ["idle", "closed"]
        # The log tells the story at INFO: a line per host bootstrapped, joined, and per reclaim decision.
        said = [re.sub(r"\(op-\S+\)", "(K)", re.sub(r"host \S+", "host H", text)) for _, text in host_lines(caplog)]
        assert said[:4] == ["host H bootstrapped (attempt 1)"] * 2 + ["host H joined the controller"] * 2, said
        assert sorted(said[4:6]) == [
            "reclaim: host H (K) is kept: closing: turned busy before the close",
            "reclaim: host H (K) is returned: idle",
        ]
        assert said[6:] == ["reclaim: host H (K) is returned: closed"]
