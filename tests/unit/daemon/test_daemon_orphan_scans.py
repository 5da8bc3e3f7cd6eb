"""The daemon's orphan scans: the status member, the metrics, a failing scan, a stop, the executor's refusal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.daemon.guarded import PassAborted, guard_parts
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.orphanscan import OrphanScans
from orchestrator.daemon.statusdoc import build_document
from orchestrator.model.config import Config
from orchestrator.ops.executor import OpParts
from orchestrator.ops.facts import NoFacts
from orchestrator.ops.fence import ReadOnlyFence
from orchestrator.ops.hosts import NoHosts
from orchestrator.orphans.classes import Finding
from orchestrator.orphans.report import ProviderSummary, ScanReport
from orchestrator.reconcile.breaker import Breakers
from orchestrator.services.status_text import orphans_line
from tests.unit.daemon.daemon_helpers import site_text

T0 = 1_800_000_000.0


def site(tmp_path: Path, orphans: str = "{interval: 60s, settle_window: 30s}") -> LoadedConfig:
    text = site_text() + f"state_dir: {tmp_path / 'state'}\npolicy: {{orphans: {orphans}}}\n"
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Scanner:
    """Stands in for OrphanScanner: one scripted report (or error) per scan, and what it was asked."""

    def __init__(self, clock: Clock, *results: ScanReport | Exception) -> None:
        self.clock = clock
        self.results = list(results)
        self.asked: list[tuple[bool, Config]] = []
        self.config: Config | None = None

    def __call__(self, config: Config) -> Scanner:
        self.config = config
        return self

    def scan(self, act: bool = False, provider: str | None = None) -> ScanReport:
        assert self.config is not None
        self.asked.append((act, self.config))
        result = self.results.pop(0)
        self.clock.now += 3  # a scan takes a while
        if isinstance(result, Exception):
            raise result
        result.finished = self.clock.now
        return result


def stray_report(started: float, term: int = 1, term_started: float = T0 - 3600) -> ScanReport:
    report = ScanReport("site1", started, act=True)
    report.controller = {"read": True, "error": "", "term": term, "term_started": term_started, "hosts": 0}
    summary = ProviderSummary("sim", drift="read", listing="read", shards=1)
    summary.not_scanned = {"d": "licences are not provisioned yet"}
    summary.settle = {"passed": True}
    report.providers = [summary]
    report.findings = [
        Finding(
            "b", "sim", "i-0stray", "report", name="stray", outcome="reported", reason="orphanReported fact committed"
        ),
        Finding("a", "sim", "i-0silent", "return", instance_key="op-1-000", outcome="skipped", reason="rate limit"),
    ]
    return report


def sample(metrics: DaemonMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_scan_acts_the_daemon_way_and_its_summary_and_metrics_follow(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    clock, metrics = Clock(), DaemonMetrics()
    scanner = Scanner(clock, stray_report(T0))
    scans = OrphanScans(loaded.config, Lifecycle(loaded, lambda: loaded), metrics, clock, scanner)
    assert scans.to_json()["last_scan"] is None and scans.due() == "start"

    assert scans.run("start")
    assert [act for act, _ in scanner.asked] == [True]
    member = scans.to_json()
    last = member["last_scan"]
    assert last["ok"] and last["trigger"] == "start" and last["finished"] == T0 + 3
    assert last["findings"] == {"a": 1, "b": 1, "c": 0, "d": 0, "e": 0}
    assert last["outcomes"] == {"taken": 0, "skipped": 1, "would-take": 0, "reported": 1, "failed": 0}
    assert [(f["class"], f["object_id"], f["outcome"]) for f in last["listed"]] == [
        ("b", "i-0stray", "reported"),
        ("a", "i-0silent", "skipped"),
    ]
    assert last["providers"]["sim"]["not_scanned"] == {"d": "licences are not provisioned yet"}
    # The next one an interval after this one ended.
    assert (member["next_scan"], member["next_reason"]) == (T0 + 3 + 60, "interval")
    assert sample(metrics, "xceprov_orphan_findings", provider="sim", **{"class": "b"}) == 1
    assert sample(metrics, "xceprov_orphan_findings", provider="sim", **{"class": "c"}) == 0
    assert sample(metrics, "xceprov_orphan_actions_total", provider="sim", action="report", outcome="reported") == 1
    assert sample(metrics, "xceprov_orphan_actions_total", provider="sim", action="return", outcome="skipped") == 1
    assert sample(metrics, "xceprov_orphan_scans_total", result="ok") == 1
    assert sample(metrics, "xceprov_orphan_last_scan_timestamp_seconds") == T0 + 3

    # The status document carries the member; `xceprov status` shows one line for it.
    doc = build_document(
        daemon={},
        report=None,
        leases=[],
        breakers=Breakers.load(tmp_path / "state", loaded.config.policy.breaker),
        facts={},
        hosts=[],
        now=clock.now,
        orphans=member,
    )
    assert doc["orphans"]["last_scan"]["findings"]["b"] == 1
    line = orphans_line(json.loads(json.dumps(doc["orphans"])), T0 + 13)
    assert line == (
        "  orphans: last scan (start) 10s ago: 2 findings (a) 1, (b) 1: skipped 1, reported 1; next (interval) in 50s"
    )


def test_a_failing_scan_is_logged_and_audited_and_the_next_one_comes_an_interval_later(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    clock, metrics = Clock(), DaemonMetrics()
    scanner = Scanner(clock, RuntimeError("terraform exploded\nsecond line"), stray_report(T0))
    scans = OrphanScans(loaded.config, Lifecycle(loaded, lambda: loaded), metrics, clock, scanner)
    assert scans.run("start")  # the loop goes on
    last = scans.to_json()["last_scan"]
    assert (last["ok"], last["error"], last["trigger"]) == (False, "terraform exploded", "start")
    entries = [json.loads(x) for x in (tmp_path / "state" / "audit.log").read_text().splitlines()]
    assert [(e["action"], e["phase"], e["error"]) for e in entries] == [
        ("phase-failed", "orphans", "terraform exploded")
    ]
    assert sample(metrics, "xceprov_orphan_scans_total", result="failed") == 1
    assert orphans_line(scans.to_json(), clock.now).startswith(
        "  orphans: last scan (start) 0s ago FAILED: terraform exploded;"
    )
    assert scans.due() is None
    clock.now += 60
    assert scans.due() == "interval" and scans.run("interval")
    assert scans.to_json()["last_scan"]["ok"]


def test_a_failover_seen_by_a_scan_schedules_the_scan_after_the_settle_window(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    clock = Clock()
    scanner = Scanner(clock, stray_report(T0, term=1), stray_report(T0, term=2, term_started=T0 + 10), stray_report(T0))
    scans = OrphanScans(loaded.config, Lifecycle(loaded, lambda: loaded), DaemonMetrics(), clock, scanner)
    scans.run("start")
    clock.now = T0 + 63
    # This scan sees term 2, started 53 s before it: past the window already, it was the one to act.
    assert scans.due() == "interval" and scans.run("interval")
    assert scans.to_json()["term"] == 2 and scans.to_json()["failover_scan"] is None
    # A new term the link reports (started now): one scan 30 s (+1) later, before the interval's.
    scans.observe_term(3, clock.now)
    member = scans.to_json()
    assert (member["next_reason"], member["next_scan"]) == ("failover", clock.now + 31)
    clock.now += 31
    assert scans.due() == "failover"
    # A reload changes the interval from the next scan on.
    new = site(tmp_path, "{interval: 5m, settle_window: 30s}")
    scans.reload(new.config)
    assert scans.run("failover") and scanner.asked[-1][1] is new.config
    assert scans.to_json()["next_scan"] == clock.now + 300


def test_no_scan_once_stopping_and_the_executor_refuses_a_new_action(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    clock = Clock()
    lifecycle = Lifecycle(loaded, lambda: loaded)
    scanner = Scanner(clock, stray_report(T0))
    scans = OrphanScans(loaded.config, lifecycle, DaemonMetrics(), clock, scanner)
    parts = OpParts(loaded.config, tmp_path, object(), ReadOnlyFence(), NoFacts(), NoHosts())  # type: ignore[arg-type]
    guard_parts(parts, lifecycle, DaemonMetrics())  # as the daemon wires its executor's parts
    done: list[str] = []
    with parts.recorder.action("orphan report of i-1"):
        done.append("before the stop")
    lifecycle.request_stop("SIGTERM")
    assert not scans.run("interval") and scanner.asked == []  # not started
    with pytest.raises(PassAborted, match="daemon is stopping"), parts.recorder.action("orphan return of i-2"):
        done.append("after the stop")
    assert done == ["before the stop"]


def test_a_scan_that_could_not_read_the_controller_shows_as_incomplete_not_as_no_findings(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    clock = Clock()
    report = ScanReport("site1", T0, act=True)
    report.controller = {"read": False, "error": "controller unreachable", "term": 0, "term_started": 0.0}
    summary = ProviderSummary("sim", drift="read", listing="read", shards=1)
    summary.not_scanned = {"d": "licences are not provisioned yet"}
    summary.skip_unread({c: "the controller's facts are unread (controller unreachable)" for c in ("a", "b", "c")})
    report.providers = [summary]
    scans = OrphanScans(
        loaded.config, Lifecycle(loaded, lambda: loaded), DaemonMetrics(), clock, Scanner(clock, report)
    )
    assert scans.run("start")
    last = scans.to_json()["last_scan"]
    assert last["complete"] is False and last["providers"]["sim"]["unread"] == ["a", "b", "c"]
    line = orphans_line(json.loads(json.dumps(scans.to_json())), clock.now)
    assert "no findings; INCOMPLETE, classes not scanned: sim (a, b, c);" in line
