"""The last orphan scan as the daemon's status file shows it (``orphans.last_scan``), typed.

:func:`summary` makes it from the scan's report, :func:`failed_summary` from a scan that raised;
``to_json()`` is the one place either becomes the member documented in docs/daemon.md ("Status
file"), recorded in ``tests/unit/daemon/golden/orphans_last_scan.json``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Final

from orchestrator.orphans.classes import CLASS_NAMES, Finding
from orchestrator.orphans.report import ProviderSummary, ScanReport

# The status file lists at most this many findings (every one is in the audit log and in
# ``xceprov orphans``): a broken view flagging thousands must not bloat a file written each pass.
LISTED: Final = 20
OUTCOMES: Final = ("taken", "skipped", "would-take", "reported", "failed")


@dataclass(frozen=True)
class ProviderScan:
    """One provider's part of a scan: its findings, the classes not scanned and why."""

    findings: int
    not_scanned: Mapping[str, str]
    unread: Sequence[str]
    settle: bool  # its settle window had passed
    breaker_open: bool

    @classmethod
    def of(cls, p: ProviderSummary, findings: Sequence[Finding]) -> ProviderScan:
        """The provider's summary in the scan's report, with the scan's findings."""
        found = sum(1 for f in findings if f.provider == p.provider)
        return cls(
            found, dict(p.not_scanned), list(p.unread), bool(p.settle.get("passed", False)), bool(p.breaker.get("open"))
        )

    def to_json(self) -> dict[str, Any]:
        """``findings``, ``not_scanned``, ``unread``, ``settle``, ``breaker_open``: the fields, in their order."""
        return asdict(self)


@dataclass(frozen=True)
class FailedScan:
    """A scan that raised: when, and its error (no findings: nothing it found can be trusted)."""

    trigger: str
    started: float
    finished: float
    error: str

    @property
    def ok(self) -> bool:
        """Never: the scan raised."""
        return False

    def to_json(self) -> dict[str, Any]:
        """``trigger``, ``ok`` (false), ``error``, ``started``, ``finished``."""
        return {
            "trigger": self.trigger,
            "ok": False,
            "error": self.error,
            "started": self.started,
            "finished": self.finished,
        }


@dataclass(frozen=True)
class ScanSummary:
    """A scan that ran: findings per class, outcomes, per provider, the first findings."""

    trigger: str
    started: float
    finished: float
    act: bool
    dry_run: bool
    controller: Mapping[str, Any]  # read, error, term, term_started
    complete: bool
    findings: Mapping[str, int]  # per class, every class
    outcomes: Mapping[str, int]  # per outcome, every outcome
    providers: Mapping[str, ProviderScan]
    listed: Sequence[Finding]  # at most LISTED

    @property
    def ok(self) -> bool:
        """Always: the scan ran to its end."""
        return True

    def to_json(self) -> dict[str, Any]:
        """The ``last_scan`` member of a scan that ran."""
        return {
            "trigger": self.trigger,
            "ok": True,
            "error": "",
            "started": self.started,
            "finished": self.finished,
            "act": self.act,
            "dry_run": self.dry_run,
            "controller": dict(self.controller),
            "complete": self.complete,
            "findings": dict(self.findings),
            "outcomes": dict(self.outcomes),
            "providers": {name: p.to_json() for name, p in self.providers.items()},
            "listed": [
                {
                    "class": f.cls,
                    "provider": f.provider,
                    "object_id": f.object_id,
                    "instance_key": f.instance_key,
                    "name": f.name,
                    "action": f.action,
                    "outcome": f.outcome,
                    "reason": f.reason,
                }
                for f in self.listed
            ],
        }


def summary(report: ScanReport, trigger: str) -> ScanSummary:
    """The last scan as the status file shows it: findings per class, outcomes, a few findings."""
    by_class: Counter[str] = Counter({cls: 0 for cls in CLASS_NAMES})
    by_class.update(f.cls for f in report.findings)
    outcomes: Counter[str] = Counter({o: 0 for o in OUTCOMES})
    outcomes.update(f.outcome for f in report.findings)
    return ScanSummary(
        trigger=trigger,
        started=report.started,
        finished=report.finished,
        act=report.act,
        dry_run=report.dry_run,
        controller={k: report.controller.get(k) for k in ("read", "error", "term", "term_started")},
        complete=report.complete,
        findings=dict(by_class),
        outcomes=dict(outcomes),
        providers={p.provider: ProviderScan.of(p, report.findings) for p in report.providers},
        listed=list(report.findings[:LISTED]),
    )


def failed_summary(trigger: str, started: float, finished: float, error: str) -> FailedScan:
    """A scan that raised: when, and its error."""
    return FailedScan(trigger, started, finished, error)
