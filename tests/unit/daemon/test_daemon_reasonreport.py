"""After each pass the daemon journals its reasons and tells the controller (daemon/reasonreport.py).

What a user notices: the controller is told when the reasons change and at least every
``REPORT_EVERY`` seconds, not every pass; a controller that cannot be told costs a log line, never
the pass; a pass that decided nothing (failed read) changes nothing; ``xceprov status`` shows a
line per template with unmet demand.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import pytest

from orchestrator.clients.controller.types import TemplateReason
from orchestrator.daemon.reasonreport import REPORT_EVERY, ReasonReporting
from orchestrator.errors import ControllerError
from orchestrator.reconcile.reasonjournal import read_journal
from orchestrator.reconcile.report import PassReport, PhaseOutcome
from orchestrator.reconcile.results import ScaleOutResult
from orchestrator.reconcile.scaleout import ScaleOutDecision
from orchestrator.services.status import DaemonView
from orchestrator.services.status_text import render_daemon

QUOTA = {"provider": "aws", "skipped": "failed", "block": {"class": "quota", "until": 1_800_003_720.0, "text": "x"}}


def a_pass(*decisions: ScaleOutDecision, decided: bool = True) -> PassReport:
    phase = PhaseOutcome("scale-out", decided, evidence=ScaleOutResult() if decided else None)
    return PassReport("interval", 0.0, 1.0, [phase], {}, [], [], decisions=list(decisions))


HELD = ScaleOutDecision("cpu", "no-room", (), {"providers": [QUOTA]})
LAUNCHED = ScaleOutDecision("cpu", "ops", (), {"providers": [{"provider": "sim", "count": 2}]})


def test_the_controller_is_told_on_change_and_every_few_minutes(tmp_path: Path) -> None:
    sent: list[tuple[list[TemplateReason], float]] = []
    reporting = ReasonReporting(tmp_path, lambda reasons, now: sent.append((list(reasons), now)))
    reporting.after_pass(a_pass(HELD), 100.0)
    reporting.after_pass(a_pass(HELD), 110.0)  # unchanged: not sent again
    reporting.after_pass(a_pass(HELD), 100.0 + REPORT_EVERY)  # but again after REPORT_EVERY
    reporting.after_pass(a_pass(LAUNCHED), 100.0 + REPORT_EVERY + 1)
    reporting.after_pass(a_pass(), 100.0 + REPORT_EVERY + 2)  # demand met: told so (no reason)
    assert [(now, [(r.template, r.code, r.provider, r.until) for r in reasons]) for reasons, now in sent] == [
        (100.0, [("cpu", "quota", "aws", 1_800_003_720.0)]),
        (100.0 + REPORT_EVERY, [("cpu", "quota", "aws", 1_800_003_720.0)]),
        (101.0 + REPORT_EVERY, [("cpu", "launched", "sim", None)]),
        (102.0 + REPORT_EVERY, []),
    ]
    assert [e.time for e in read_journal(tmp_path)] == [100.0, 101.0 + REPORT_EVERY, 102.0 + REPORT_EVERY]


def test_a_pass_that_decided_nothing_says_nothing(tmp_path: Path) -> None:
    sent: list[Sequence[TemplateReason]] = []
    reporting = ReasonReporting(tmp_path, lambda reasons, now: sent.append(reasons))
    reporting.after_pass(a_pass(HELD, decided=False), 100.0)
    assert sent == [] and read_journal(tmp_path) == []


def test_a_controller_that_cannot_be_told_costs_a_log_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[float] = []

    def send(reasons: Sequence[TemplateReason], now: float) -> None:
        calls.append(now)
        raise ControllerError("not connected to the controller")

    reporting = ReasonReporting(tmp_path, send)
    with caplog.at_level(logging.WARNING):
        reporting.after_pass(a_pass(HELD), 100.0)
        reporting.after_pass(a_pass(HELD), 101.0)  # not told yet: tried again
    assert calls == [100.0, 101.0]
    said = [r for r in caplog.records if "scale-out reasons not reported" in r.getMessage()]
    assert [r.getMessage() for r in said] == [
        "scale-out reasons not reported to the controller: not connected to the controller"
    ]  # once per cause
    assert len(read_journal(tmp_path)) == 1  # the journal does not depend on the controller


def test_status_text_shows_a_line_per_template_with_unmet_demand() -> None:
    report = a_pass(ScaleOutDecision("cpu", "partial", (), {"providers": [{"provider": "sim", "count": 2}, QUOTA]}))
    view = DaemonView(
        running=True,
        stale=False,
        age=1.0,
        path="status.json",
        state="running",
        last_pass={"gaps": {"cpu": {"gap": 4}}},
        reasons=report.to_json()["reasons"],
    )
    text = "\n".join(render_daemon(view))
    assert "  cpu: 4 wanted, launched 2 on sim, held: quota on aws until 09:02:00" in text
