"""After each pass: its scale-out reasons into the journal and to the controller.

The journal (``<state_dir>/reasons.jsonl``, :mod:`~orchestrator.reconcile.reasonjournal`) gets
the templates whose reasons changed; the controller (``reportReasons``, docs/protocol.md) gets
one reason per template (:func:`~orchestrator.reconcile.reasons.primary`) when they changed and
at least every :data:`REPORT_EVERY` seconds (a restarted controller learns them again). A pass
that decided nothing (its read failed, its scale-out phase was skipped) says nothing new: the
last reasons stand. A failure of either is logged (a report's, once per cause) and never fails
the pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from orchestrator.clients.controller.types import TemplateReason
from orchestrator.reconcile.reasonjournal import ReasonJournal
from orchestrator.reconcile.reasons import Reason, primary
from orchestrator.reconcile.report import PassReport
from orchestrator.reconcile.results import ScaleOutResult

log = logging.getLogger(__name__)

# The longest the controller goes without a report while the daemon runs passes.
REPORT_EVERY: Final = 120.0

Send = Callable[[Sequence[TemplateReason], float], None]


class ReasonReporting:
    """The journal and the controller's reports of one daemon (module docstring)."""

    def __init__(self, state_dir: Path, send: Send, every: float = REPORT_EVERY) -> None:
        self.journal = ReasonJournal(Path(state_dir))
        self.send = send
        self.every = every
        self._sent: list[TemplateReason] | None = None
        self._sent_at = 0.0
        self._failure = ""  # the last failure's line ("" after a report went through)

    def after_pass(self, report: PassReport, now: float) -> None:
        """Record and report the pass's reasons (nothing when it decided nothing)."""
        if report.result("scale-out", ScaleOutResult) is None:
            return
        reasons = report.reasons
        try:
            self.journal.record(now, reasons)
        except OSError as exc:
            log.warning("scale-out reasons not journaled: %s", exc)
        told = [told_reason(template, found) for template, found in sorted(reasons.items())]
        wanted = [r for r in told if r is not None]
        if wanted == self._sent and now - self._sent_at < self.every:
            return
        try:
            self.send(wanted, now)
        except Exception as exc:  # the controller is away or does not serve it: the pass goes on
            line = (str(exc).splitlines() or [type(exc).__name__])[0]
            # Said once per cause: a controller that does not serve reportReasons is no news each pass.
            level = logging.DEBUG if line == self._failure else logging.WARNING
            log.log(level, "scale-out reasons not reported to the controller: %s", line)
            self._failure = line
            return
        self._sent, self._sent_at, self._failure = wanted, now, ""


def told_reason(template: str, found: Sequence[Reason]) -> TemplateReason | None:
    """What the controller is told of ``template``: its primary reason."""
    first = primary(template, found)
    if first is None:
        return None
    return TemplateReason(first.template, first.code, first.detail, first.provider, first.until)
