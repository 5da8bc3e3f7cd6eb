"""The daemon's orphan scans: run one between two passes when :class:`OrphanTimer` says so.

A scan is the one of ``xceprov orphans`` (``orchestrator/orphans/scan.py``) with ``act=True``;
``policy.orphans.dry_run`` still wins (the scanner reads it). It runs on the loop's thread, so
never beside a pass (they share the executor and the leases), held as work in flight: a SIGTERM
waits for it, and its actions go through the daemon's executor, which refuses a new one once
stopping. A scan that raises is logged and audited (``phase-failed``, phase ``orphans``) and the
loop goes on; the next one is due an interval later. :func:`~.scansummary.summary` is the status
file's ``orphans.last_scan`` (docs/daemon.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

from orchestrator.daemon.guarded import NotStarted, PassAborted, held_unless_stopping
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.orphantimer import OrphanTimer
from orchestrator.daemon.scansummary import FailedScan, ScanSummary, failed_summary, summary
from orchestrator.model.config import Config
from orchestrator.orphans.classes import CLASS_NAMES
from orchestrator.orphans.inputs import first_line
from orchestrator.orphans.report import ScanReport
from orchestrator.workspace.audit import audit

log = logging.getLogger(__name__)

PHASE: Final = "orphans"


class Scanning(Protocol):
    """What the daemon needs of the scanner (``orchestrator.orphans.scan.OrphanScanner``)."""

    def scan(self, act: bool = False, provider: str | None = None) -> ScanReport:
        """One scan of every provider."""
        ...


def class_counts(report: ScanReport) -> dict[str, dict[str, int]]:
    """Per provider, findings by class (every class, 0 when none: the gauge of a class that emptied reads 0)."""
    out: dict[str, dict[str, int]] = {p.provider: dict.fromkeys(CLASS_NAMES, 0) for p in report.providers}
    for f in report.findings:
        out.setdefault(f.provider, dict.fromkeys(CLASS_NAMES, 0))[f.cls] += 1
    return out


class OrphanScans:
    """The timer, the last scan's summary, and running a scan the daemon's way."""

    def __init__(
        self,
        config: Config,
        lifecycle: Lifecycle,
        metrics: DaemonMetrics,
        clock: Callable[[], float],
        scanner: Callable[[Config], Scanning],
    ) -> None:
        orphans = config.policy.orphans
        self.config = config
        self.lifecycle = lifecycle
        self.metrics = metrics
        self.clock = clock
        self.scanner = scanner
        self.timer = OrphanTimer.at_start(float(orphans.interval), float(orphans.settle_window), clock())
        self.last: ScanSummary | FailedScan | None = None

    @property
    def state_dir(self) -> Path:
        """Where the audit log is."""
        return Path(self.config.state_dir)

    def reload(self, config: Config) -> None:
        """A new configuration: its interval and settle window from now on."""
        self.config = config
        orphans = config.policy.orphans
        self.timer.reconfigure(float(orphans.interval), float(orphans.settle_window))

    def due(self) -> str | None:
        """Why a scan is due now, None when none is."""
        return self.timer.due(self.clock())

    def observe_term(self, term: int, started: float) -> None:
        """The controller's term as the link or a scan saw it; a new one schedules the post-failover scan."""
        if self.timer.observe_term(term, started, self.clock()) is not None:
            self._scheduled(term)

    def _scheduled(self, term: int) -> None:
        at = self.timer.settle_at or 0.0
        log.info(
            "controller term %d: an orphan scan is scheduled in %.0fs, once policy.orphans.settle_window "
            "(%.0fs) after the term started has passed",
            term,
            max(0.0, at - self.clock()),
            self.timer.settle_window,
        )

    def run(self, trigger: str) -> bool:
        """One scan (``trigger``: why); False when the stop refused it or cut it short."""
        started = self.clock()
        try:
            with held_unless_stopping(self.lifecycle, f"orphan scan ({trigger})"):
                report = self.scanner(self.config).scan(act=True)
        except (NotStarted, PassAborted) as exc:
            log.info("orphan scan (%s) not run to its end: %s", trigger, exc)
            return False
        except Exception as exc:  # a scan that fails must not stop the loop
            error = first_line(exc)
            log.exception("orphan scan (%s) failed", trigger)
            audit(self.state_dir, "phase-failed", phase=PHASE, error=error, trigger=trigger)
            finished = self.clock()
            self.timer.scanned(started, finished)
            self.last = failed_summary(trigger, started, finished, error)
            self.metrics.orphan_scan(finished, None)
            return True
        finished = report.finished or self.clock()
        ctl = report.controller
        if ctl.get("read"):
            # As of the scan's start: a term whose window had passed by then was this scan's to act on.
            self.timer.observe_term(int(ctl.get("term") or 0), float(ctl.get("term_started") or 0.0), started)
        self.timer.scanned(started, finished)
        if self.timer.settle_at is not None:
            self._scheduled(self.timer.term)
        self.last = summary(report, trigger)
        self.metrics.orphan_scan(
            finished, class_counts(report), [(f.provider, f.action, f.outcome) for f in report.findings]
        )
        found = self.last.findings
        log.info(
            "orphan scan (%s): %d findings (%s); %s",
            trigger,
            len(report.findings),
            ", ".join(f"{c} {n}" for c, n in found.items() if n) or "none",
            ", ".join(f"{o} {n}" for o, n in self.last.outcomes.items() if n) or "no action",
        )
        return True

    def to_json(self) -> dict[str, Any]:
        """The status file's ``orphans`` member."""
        return {**self.timer.to_json(), "last_scan": self.last.to_json() if self.last is not None else None}
