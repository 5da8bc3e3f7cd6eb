"""The daemon's status document and the metrics set from it: leases, instances by state, ops, breakers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.clients.controller.lease import LeaseStatus
from orchestrator.clients.controller.types import HostInfo
from orchestrator.configfile import parse_config
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.statusdoc import (
    bootstrap_share,
    build_document,
    instance_states,
    lease_rows,
    update_metrics,
)
from orchestrator.model.config import BreakerSettings
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.reconcile.bootstraps import BootstrapRecord
from orchestrator.reconcile.breaker import Breakers

E = Epoch(3, 2)


def fact(kind: FactKind, op: str, fid: int, **kw: object) -> Fact:
    return Fact(kind, "sim", op, E, fact_id=fid, committed=float(fid), **kw)  # type: ignore[arg-type]


# op-a: three hosts; 000 joined and idle, 001 expected (controller knows it), 002 only created.
# op-b: one host, intent only. op-c: one host, returned (gone: not counted).
FACTS = [
    fact(FactKind.REQUEST_INTENT, "op-a", 1, template="cpu", count=3),
    *[fact(FactKind.INSTANCE_CREATED, "op-a", 2 + i, instance_key=f"op-a-00{i}", template="cpu") for i in range(3)],
    fact(FactKind.EXPECTED_HOST, "op-a", 5, instance_key="op-a-000", template="cpu"),
    fact(FactKind.EXPECTED_HOST, "op-a", 6, instance_key="op-a-001", template="cpu"),
    fact(FactKind.REQUEST_INTENT, "op-b", 7, template="cpu", count=1),
    fact(FactKind.REQUEST_INTENT, "op-c", 8, template="cpu", count=1),
    fact(FactKind.INSTANCE_CREATED, "op-c", 9, instance_key="op-c-000", template="cpu"),
    fact(FactKind.RETURNED, "op-c", 10, instance_key="op-c-000", template="cpu"),
]
HOSTS = [
    HostInfo("h0", "idle", instance_key="op-a-000", provider="sim"),
    HostInfo("h1", "expected", instance_key="op-a-001", provider="sim"),
    HostInfo("other", "busy", instance_key="not-ours-000", provider="sim"),
]


CONFIG = parse_config(
    """
cluster: site1
controller: {ca: system}
daemon: {reconcile_interval: 30s}
policy: {budget_per_hour: 10}
providers:
  sim: {module: xcesim, budget_per_hour: 2.5}
templates:
  cpu:
    providers:
      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}
  gpu:
    providers:
      sim: {flavor: g4.xlarge, image: debian-12, cost_per_hour: 3.06}
""",
    "site.yaml",
    Path("/srv/site"),
).config


def samples(metrics: DaemonMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_instances_by_state_from_the_controller_then_the_facts() -> None:
    assert instance_states({"sim": FACTS}, HOSTS) == {"sim": {"created": 1, "expected": 1, "idle": 1, "requested": 1}}
    # A provider with no facts yet reads as no instances (its gauge goes to 0, not missing).
    assert instance_states({"aws": []}, HOSTS) == {"aws": {}}


def test_lease_rows_say_who_holds_a_lease_the_daemon_does_not() -> None:
    rows = lease_rows(
        [
            LeaseStatus("sim", True, E, 15.0, 9.25, "site-daemon-m1", ""),
            LeaseStatus("aws", False, None, 0.0, 0.0, "other-orchestrator", ""),
        ]
    )
    aws = {"provider": "aws", "held": False, "epoch": None, "remaining": 0.0, "ttl": 0.0}
    sim = {"provider": "sim", "held": True, "epoch": "3.2", "remaining": 9.25, "ttl": 15.0}
    assert rows == [
        {**aws, "holder": "", "note": "other-orchestrator"},
        {**sim, "holder": "site-daemon-m1", "note": ""},
    ]


def test_document_and_metrics_agree(tmp_path: Path) -> None:
    breakers = Breakers.load(tmp_path, BreakerSettings(failures=1, window=600, cool_off=3600))
    breakers.failure("gpu", "bootstrap", "unreachable", now=1000.0)
    report = {
        "trigger": "demand",
        "started": 1990.0,
        "finished": 1999.5,
        "ops": ["op-b"],
        "phases": [
            {"name": "read", "ok": True, "skipped": ""},
            {"name": "bootstrap", "ok": False, "skipped": "", "error": "ssh: unreachable"},
            {"name": "join-tracking", "evidence": {"returned": ["op-a-001"], "overdue": ["h1"]}},
            {"name": "reclaim", "evidence": {"returned": ["op-a-000", "op-c-000"]}},
        ],
        "gaps": {
            "cpu": {"template": "cpu", "wanted": 5, "in_flight": 1, "awaited": 1, "unreflected": 1, "gap": 2},
            "old": {"template": "old", "wanted": 1, "in_flight": 0, "awaited": 0, "unreflected": 0, "gap": 1},
        },
        "reclaim_candidates": [
            {"host": "h0", "provider": "sim", "key": "op-a-000", "reason": "idle"},
            {"host": "h2", "provider": "sim", "key": "op-c-000", "reason": "closed"},
        ],
        # gpu on sim refused for capacity: passed over until its backoff ends.
        "blocked": [{"provider": "sim", "template": "gpu", "class": "capacity", "failures": 1, "until": 2300.0}],
    }
    doc = build_document(
        daemon={"pid": 42, "state": "running"},
        report=report,
        leases=[LeaseStatus("sim", True, E, 15.0, 9.0, "me", "")],
        breakers=breakers,
        facts={"sim": FACTS},
        hosts=HOSTS,
        now=2000.0,
        config=CONFIG,
    )
    assert doc["daemon"] == {"pid": 42, "state": "running", "written": 2000.0}
    assert doc["reclaim_candidates"] == report["reclaim_candidates"]
    # op-a created all three and op-c's host is returned: only op-b, intent without outcome, is open.
    assert [(o["op_id"], o["kind"], o["done"], o["count"], o["pending"]) for o in doc["open_ops"]] == [
        ("op-b", "create", 0, 1, ["op-b-000"])
    ]
    assert [(b["template"], b["position"]) for b in doc["breakers"]] == [("gpu", "open")]

    metrics = DaemonMetrics()
    update_metrics(metrics, doc, CONFIG, pass_duration=9.5)
    got = samples(metrics)
    assert got[("xceprov_lease_valid", (("provider", "sim"),))] == 1
    assert got[("xceprov_lease_remaining_seconds", (("provider", "sim"),))] == 9.0
    assert got[("xceprov_instances", (("provider", "sim"), ("state", "requested")))] == 1
    assert got[("xceprov_instances", (("provider", "sim"), ("state", "idle")))] == 1
    # Every state has its sample, 0 when none is in it (a dashboard shows 0, not "no data").
    assert got[("xceprov_instances", (("provider", "sim"), ("state", "busy")))] == 0
    # Cost per hour as the budgets count it: op-a's three and op-b's pending one (op-c's is gone);
    # gpu runs nothing and reads 0. The budgets in force, and the interval, are there too.
    assert doc["cost_per_hour"] == {"sim": {"cpu": 2.0, "gpu": 0.0}}
    assert got[("xceprov_cost_per_hour", (("provider", "sim"), ("template", "cpu")))] == 2.0
    assert got[("xceprov_cost_per_hour", (("provider", "sim"), ("template", "gpu")))] == 0
    assert got[("xceprov_provider_budget_per_hour", (("provider", "sim"),))] == 2.5
    assert got[("xceprov_cluster_budget_per_hour", (("cluster", "site1"),))] == 10
    assert got[("xceprov_reconcile_interval_seconds", ())] == 30
    assert got[("xceprov_breaker_open", (("template", "gpu"),))] == 1
    assert got[("xceprov_breaker_open", (("template", "cpu"),))] == 0
    assert got[("xceprov_provider_backoff", (("provider", "sim"), ("template", "gpu")))] == 1
    assert got[("xceprov_provider_backoff", (("provider", "sim"), ("template", "*")))] == 0
    assert got[("xceprov_reconcile_last_pass_timestamp_seconds", ())] == 1999.5
    assert got[("xceprov_reconcile_pass_duration_seconds_count", ())] == 1
    assert got[("xceprov_reconcile_pass_duration_seconds_sum", ())] == 9.5
    # op-a-001 was returned past its join_deadline, op-a-000 idle past its idle_time: each timeout
    # is counted under its provider; op-c-000, returned because it was closed, passed none.
    assert doc["timeouts_expired"] == [
        {"provider": "sim", "timeout": "join_deadline", "key": "op-a-001"},
        {"provider": "sim", "timeout": "idle_time", "key": "op-a-000"},
    ]
    assert got[("xceprov_timeouts_expired_total", (("provider", "sim"), ("timeout", "join_deadline")))] == 1
    assert got[("xceprov_timeouts_expired_total", (("provider", "sim"), ("timeout", "idle_time")))] == 1
    # Demand, hosts on their way (the controller's, the awaited, the unreflected) and the gap per
    # template; a configured template the pass did not name reads 0.
    for name, value in (("demand", 5), ("in_flight", 3), ("gap", 2)):
        assert got[(f"xceprov_template_{name}", (("template", "cpu"),))] == value
        assert got[(f"xceprov_template_{name}", (("template", "gpu"),))] == 0
    assert got[("xceprov_template_gap", (("template", "old"),))] == 1
    # The failed phase counts one; the phases that went through have their series at 0.
    assert got[("xceprov_reconcile_phase_failures_total", (("phase", "bootstrap"),))] == 1
    assert got[("xceprov_reconcile_phase_failures_total", (("phase", "read"),))] == 0

    # The next pass: the idle host was returned, the breaker reset. States that emptied read 0.
    later = dict(doc, instances={"sim": {"created": 1, "expected": 1, "requested": 1}}, breakers=[])
    update_metrics(metrics, later, CONFIG, pass_duration=None)
    got = samples(metrics)
    assert got[("xceprov_instances", (("provider", "sim"), ("state", "idle")))] == 0
    assert got[("xceprov_breaker_open", (("template", "gpu"),))] == 0
    # No pass ended (a status written at stop): the pass histogram and the timeouts are unchanged.
    assert got[("xceprov_reconcile_pass_duration_seconds_count", ())] == 1
    assert got[("xceprov_timeouts_expired_total", (("provider", "sim"), ("timeout", "join_deadline")))] == 1
    assert got[("xceprov_reconcile_phase_failures_total", (("phase", "bootstrap"),))] == 1

    # A pass whose read failed: its phase counts, the others were skipped (not failed), and the
    # last known demand stays (the failed read knew none); a template no longer named reads 0.
    failed_read = {
        **doc["last_pass"],
        "phases": [
            {"name": "read", "ok": False, "skipped": "", "error": "controller unreachable"},
            {"name": "bootstrap", "ok": False, "skipped": "read failed: controller unreachable"},
        ],
        "gaps": {},
    }
    update_metrics(metrics, dict(doc, last_pass=failed_read), CONFIG, pass_duration=1.0)
    got = samples(metrics)
    assert got[("xceprov_reconcile_phase_failures_total", (("phase", "read"),))] == 1
    assert got[("xceprov_reconcile_phase_failures_total", (("phase", "bootstrap"),))] == 1
    assert got[("xceprov_template_demand", (("template", "cpu"),))] == 5
    gone = {**doc["last_pass"], "gaps": {"cpu": doc["last_pass"]["gaps"]["cpu"]}}
    update_metrics(metrics, dict(doc, last_pass=gone), CONFIG, pass_duration=1.0)
    assert samples(metrics)[("xceprov_template_demand", (("template", "old"),))] == 0


# A burst of six created hosts in every bootstrap state, plus one only intended (not counted).
BURST = [
    fact(FactKind.REQUEST_INTENT, "op-z", 20, template="cpu", count=7),
    *[fact(FactKind.INSTANCE_CREATED, "op-z", 21 + i, instance_key=f"op-z-00{i}", template="cpu") for i in range(6)],
]
BURST_HOSTS = [
    HostInfo("z0", "idle", instance_key="op-z-000", provider="sim"),  # joined: done, with or without a record
    HostInfo("z1", "expected", instance_key="op-z-001", provider="sim"),
]
RECORDS = [
    BootstrapRecord("op-z-001", "sim", "cpu", "z1", attempts=1, outcome="ok"),  # done, not joined yet
    BootstrapRecord("op-z-002", "sim", "cpu", "z2", attempts=1, outcome="failed: at task 'Copy': no file"),
    BootstrapRecord("op-z-003", "sim", "cpu", "z3", attempts=3, outcome="unreachable: refused", gave_up=True),
    BootstrapRecord("op-z-004", "sim", "cpu", "z4", outcome="stopped: not finished: the daemon is stopping"),
]


def burst_document(breakers: Breakers, records: list[BootstrapRecord], running: dict[str, set[str]]) -> dict[str, Any]:
    """The status document of the burst above, with these bootstrap records and hosts in a play."""
    return build_document(
        daemon={"pid": 42, "state": "running"},
        report=None,
        leases=[],
        breakers=breakers,
        facts={"sim": BURST},
        hosts=BURST_HOSTS,
        now=2000.0,
        bootstrap_records=records,
        bootstrapping=running,
    )


def test_the_bootstrap_share_of_a_burst_waiting_running_done_failed_in_document_and_metrics(tmp_path: Path) -> None:
    breakers = Breakers.load(tmp_path, BreakerSettings())
    running = {"sim": {"op-z-005"}}
    assert bootstrap_share({"sim": BURST, "aws": []}, BURST_HOSTS, RECORDS, running) == {
        "aws": {"waiting": 0, "running": 0, "done": 0, "failed": 0},
        # 004 (its play was stopped) waits again; 005 is in the play now.
        "sim": {"waiting": 1, "running": 1, "done": 2, "failed": 2},
    }
    doc = burst_document(breakers, RECORDS, running)
    assert doc["bootstrap"] == {"sim": {"waiting": 1, "running": 1, "done": 2, "failed": 2}}
    metrics = DaemonMetrics()
    update_metrics(metrics, doc, CONFIG, pass_duration=None)
    got = samples(metrics)
    for state, count in (("waiting", 1), ("running", 1), ("done", 2), ("failed", 2)):
        assert got[("xceprov_bootstrap_hosts", (("provider", "sim"), ("state", state)))] == count
    # The play ends and its host is done: running reads 0 again (a state that empties is not left behind).
    done = BootstrapRecord("op-z-005", "sim", "cpu", "z5", attempts=1, outcome="ok")
    update_metrics(metrics, burst_document(breakers, [*RECORDS, done], {}), CONFIG, pass_duration=None)
    got = samples(metrics)
    assert got[("xceprov_bootstrap_hosts", (("provider", "sim"), ("state", "running")))] == 0
    assert got[("xceprov_bootstrap_hosts", (("provider", "sim"), ("state", "done")))] == 3
