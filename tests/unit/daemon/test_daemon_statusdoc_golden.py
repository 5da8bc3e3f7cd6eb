"""The status document made from typed results is exactly the recorded one (docs/daemon.md, "Status file").

The report below has every phase's evidence in every shape it takes (a resume beside the pass,
one that failed, a skipped phase, a phase that raised, both shapes of a kept reclaim host); the
document built from it, written as ``status.json`` is, must equal ``golden/status.json``
byte for byte, and the metrics read from it the values the document states; so must the last
orphan scan's member (``orphans.last_scan``, ``golden/orphans_last_scan.json``).
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from orchestrator.clients.controller.lease import LeaseStatus
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.passfigures import PassFigures
from orchestrator.daemon.scansummary import failed_summary, summary
from orchestrator.daemon.statusdoc import build_document, update_metrics
from orchestrator.model.config import BreakerSettings, PolicySettings
from orchestrator.model.facts import Epoch
from orchestrator.model.ops import OpRequest
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.classify import FailureClass
from orchestrator.reconcile.gap import TemplateGap
from orchestrator.reconcile.health import Block
from orchestrator.reconcile.loop import PassReport, PhaseOutcome
from orchestrator.reconcile.reclaim import ReclaimCandidate
from orchestrator.reconcile.refusals import Refusal, RefusalMemory
from orchestrator.reconcile.results import (
    BootstrapResult,
    CreatedOp,
    FailedCreate,
    FirstBootFailure,
    GainedResume,
    HostBootstrap,
    JoinResult,
    KeptHost,
    ReadResult,
    ReclaimResult,
    ResumedOp,
    ResumeResult,
    ScaleOutResult,
    WaitingOp,
)
from orchestrator.reconcile.scaleout import ScaleOutDecision
from orchestrator.workspace.documents import LocalDocuments
from tests.unit.daemon.test_daemon_orphan_scans import T0, stray_report
from tests.unit.daemon.test_daemon_statusdoc import CONFIG, FACTS, HOSTS, samples

GOLDEN = Path(__file__).parent / "golden" / "status.json"
SCAN_GOLDEN = Path(__file__).parent / "golden" / "orphans_last_scan.json"

IDLE = ReclaimCandidate("op-a-000", "sim", "cpu", "h0", "idle", "idle", 1500.0, 3600.0, {"idle_for": 499.0})
CLOSED = ReclaimCandidate("op-c-000", "sim", "cpu", "h2", "closed", "closed", 0.0, 42.123456)
GAP = TemplateGap("cpu", 5, 1, 1, 1, {"op-b": 1})
BLOCK = Block("sim", "gpu", FailureClass.CAPACITY, 1, 2300.0, "InsufficientInstanceCapacity")
GIVEN_UP = Block("sim", "*", FailureClass.QUOTA, 3, float("inf"), "quota exceeded")
REFUSED = Refusal("capacity", "aws", "c8@a", 1, 1995.0, 1995.0, 2040.0, "InsufficientInstanceCapacity")


def refusals(root: Path) -> RefusalMemory:
    """A quota held past the status's time and a capacity hold that ended before it."""
    memory = RefusalMemory.load(LocalDocuments(root), PolicySettings(), random.Random(5))
    memory.refused("aws", "c8@a", "capacity", "InsufficientInstanceCapacity: no c8 in a", 1900.0)
    memory.refused("sim", "", "quota", "InstanceLimitExceeded: 0 more instances", 1995.0)
    return memory


def report() -> PassReport:
    """One pass that did a bit of everything."""
    phases = [
        PhaseOutcome("read", True, evidence=ReadResult(2, 17, 1989.5, 3, {"sim": 11}, ["sim"])),
        PhaseOutcome(
            "resume",
            False,
            error="op op-x: terraform apply failed",
            evidence=ResumeResult(
                resumed=[ResumedOp("op-a", "completed", "all created")],
                waiting=[WaitingOp("op-w", 2100.0)],
                closed=["op-r"],
                errors=["op op-x: terraform apply failed"],
                untracked={"sim": ["op-zz-000"]},
            ),
        ),
        PhaseOutcome("resume", True, evidence=ResumeResult(gained=["aws"])),
        PhaseOutcome("resume", True, skipped="stopping: not started", evidence=GainedResume(["gcp"])),
        PhaseOutcome(
            "scale-out",
            True,
            evidence=ScaleOutResult(
                rounds=2,
                created=[CreatedOp("op-b", "sim", "cpu", 1)],
                failed=[FailedCreate("op-f", "aws", "capacity", True)],
            ),
        ),
        PhaseOutcome(
            "bootstrap",
            True,
            evidence=BootstrapResult(
                hosts={
                    "h1": HostBootstrap("ok", 1, "done"),
                    "h3": HostBootstrap("failed: unreachable", 3, "give-up"),
                },
                returned=["op-a-003"],
                breakers={"cpu": "closed"},
            ),
        ),
        PhaseOutcome(
            "join-tracking",
            True,
            evidence=JoinResult(
                joined=["h0"],
                overdue=["h1"],
                returned=["op-a-001"],
                forgotten=["op-q-000"],
                first_boot={"h5": "failed at step join: token refused", "h6": "started, not joined"},
                first_boot_failed=[FirstBootFailure("sim", "cpu", "h5", "op-a-005", "join", "token refused", "op-r")],
            ),
        ),
        PhaseOutcome(
            "reclaim",
            False,
            error="close of h9: controller said no",
            evidence=ReclaimResult(
                candidates=2,
                returned=["op-a-000", "op-c-000"],
                kept=[
                    KeptHost("h7", "no valid lease"),
                    KeptHost("h8", "closing: its work still runs", "op-a-008", "idle"),
                ],
                errors=["close of h9: controller said no"],
            ),
        ),
    ]
    decision = ScaleOutDecision("cpu", "ops", (OpRequest("cpu", "sim", 1, 1),), {"gap": GAP.evidence(), "now": 1990.0})
    return PassReport(
        "demand",
        1990.0,
        1999.5,
        phases,
        {"cpu": GAP},
        ["op-b"],
        [IDLE, CLOSED],
        ["sim"],
        [decision],
        [BLOCK, GIVEN_UP],
        refused=[REFUSED],
    )


def failed_read() -> PassReport:
    """A pass whose read raised: every later phase skipped."""
    phases = [PhaseOutcome("read", False, error="controller not connected")]
    phases += [PhaseOutcome(n, False, skipped="read failed: controller not connected") for n in ("resume", "reclaim")]
    return PassReport("interval", 2000.0, 2000.25, phases, {}, [], [])


def document(tmp_path: Path, last: PassReport | dict[str, Any] | None = None) -> dict[str, Any]:
    """The status document of the pass ``last`` (the typed report above by default)."""
    breakers = Breakers.load(tmp_path, BreakerSettings(failures=1, window=600, cool_off=3600))
    breakers.failure("gpu", "bootstrap", "unreachable", now=1000.0)
    return build_document(
        daemon={"pid": 42, "state": "running"},
        report=report() if last is None else last,
        leases=[LeaseStatus("sim", True, Epoch(3, 2), 15.0, 9.0, "me", "")],
        breakers=breakers,
        facts={"sim": FACTS},
        hosts=HOSTS,
        now=2000.0,
        config=CONFIG,
        refusals=refusals(tmp_path / "refusals"),
    )


def test_the_status_document_of_a_pass_is_the_recorded_one(tmp_path: Path) -> None:
    got = json.dumps(document(tmp_path), indent=2, sort_keys=True) + "\n"
    assert got == GOLDEN.read_text()
    # The same document from the report's JSON (a ``last_pass`` written before).
    assert document(tmp_path / "again", report().to_json()) == json.loads(got)


def test_the_figures_of_a_typed_report_are_those_read_back_from_its_document() -> None:
    for made in (report(), failed_read()):
        assert PassFigures.of(made) == PassFigures.from_json(made.to_json())
    figures = PassFigures.of(report())
    assert (figures.unjoined, figures.reclaimed) == (("op-a-001",), ("op-a-000", "op-c-000"))
    assert [p.name for p in figures.phases if p.failed] == ["resume", "reclaim"]
    assert figures.blocked == (("sim", "gpu"), ("sim", "*"))


def test_a_failed_read_reports_every_later_phase_skipped_with_the_reason() -> None:
    assert failed_read().to_json()["phases"] == [
        {"name": "read", "ok": False, "skipped": "", "error": "controller not connected", "evidence": {}},
        *[
            {"name": n, "ok": False, "skipped": "read failed: controller not connected", "error": "", "evidence": {}}
            for n in ("resume", "reclaim")
        ],
    ]


@pytest.mark.parametrize("typed", [True, False], ids=["typed-report", "document-alone"])
def test_the_metrics_of_the_recorded_document(tmp_path: Path, typed: bool) -> None:
    metrics = DaemonMetrics()
    figures = PassFigures.of(report()) if typed else None
    update_metrics(metrics, document(tmp_path), CONFIG, pass_duration=9.5, figures=figures)
    got = samples(metrics)
    # Both failed phases count one; the skipped beside resume is no failure.
    assert got[("xceprov_reconcile_phase_failures_total", (("phase", "resume"),))] == 1
    assert got[("xceprov_reconcile_phase_failures_total", (("phase", "reclaim"),))] == 1
    assert got[("xceprov_reconcile_phase_failures_total", (("phase", "scale-out"),))] == 0
    assert got[("xceprov_provider_backoff", (("provider", "sim"), ("template", "gpu")))] == 1
    assert got[("xceprov_provider_backoff", (("provider", "sim"), ("template", "*")))] == 1
    assert got[("xceprov_timeouts_expired_total", (("provider", "sim"), ("timeout", "join_deadline")))] == 1
    assert got[("xceprov_timeouts_expired_total", (("provider", "sim"), ("timeout", "idle_time")))] == 1
    for name, value in (("demand", 5), ("in_flight", 3), ("gap", 2)):
        assert got[(f"xceprov_template_{name}", (("template", "cpu"),))] == value
    assert got[("xceprov_reconcile_last_pass_timestamp_seconds", ())] == 1999.5
    assert got[("xceprov_first_boot_failures_total", (("provider", "sim"), ("step", "join")))] == 1
    # The memory of refusals: the quota held (until its end, unix seconds), the capacity hold over.
    quota = next(r for r in document(tmp_path / "doc")["refusals"] if r["scope"] == "quota")
    held = "xceprov_offering_held_until_seconds"
    assert got[(held, (("placement", ""), ("provider", "sim"), ("scope", "quota")))] == quota["until"] > 2000.0
    assert got[(held, (("placement", "c8@a"), ("provider", "aws"), ("scope", "capacity")))] == 0
    refused = (("placement", "c8@a"), ("provider", "aws"), ("scope", "capacity"))
    assert got[("xceprov_refusals_total", refused)] == 1
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    text = generate_latest(metrics.registry).decode()
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_last_orphan_scan_member_is_the_recorded_one() -> None:
    report = stray_report(T0)
    report.finished = T0 + 3
    got = {
        "ok": summary(report, "start").to_json(),
        "failed": failed_summary("interval", T0, T0 + 1, "terraform exploded").to_json(),
    }
    assert json.dumps(got, indent=2, sort_keys=True) + "\n" == SCAN_GOLDEN.read_text()
