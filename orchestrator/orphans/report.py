"""The scan's report: per provider what was read and scanned, and one entry per finding.

``ScanReport.to_json()`` is the document of ``xceprov orphans --json`` (docs/orphans-json.md);
:func:`table` is the text form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from orchestrator.model.text import printable
from orchestrator.orphans.classes import Finding

FORMAT: Final = 1


@dataclass
class ProviderSummary:
    """What one provider's part of the scan read and judged."""

    provider: str
    drift: str = "not read"  # "read" | "unreadable: ..."
    listing: str = "not read"  # "read" | "not supported by the module" | "unreadable: ..."
    shards: int = 0
    not_scanned: dict[str, str] = field(default_factory=dict)  # class → why
    # The classes of ``not_scanned`` left out because a view could not be read this time (not
    # because the view does not exist, as licences or a module without a tagged listing).
    unread: list[str] = field(default_factory=list)
    instances: int = 0
    in_flight: list[str] = field(default_factory=list)
    lease: bool = False
    settle: dict[str, Any] = field(default_factory=dict)
    breaker: dict[str, Any] = field(default_factory=dict)
    actions_left: int = 0

    def to_json(self) -> dict[str, Any]:
        """The report's provider entry."""
        return {
            "provider": self.provider,
            "cloud": {"drift": self.drift, "listing": self.listing, "shards": self.shards},
            "not_scanned": dict(self.not_scanned),
            "unread": list(self.unread),
            "instances": self.instances,
            "in_flight_objects": list(self.in_flight),
            "lease": self.lease,
            "settle": dict(self.settle),
            "breaker": dict(self.breaker),
            "actions_left": self.actions_left,
        }

    def skip_unread(self, why: dict[str, str]) -> None:
        """Classes not scanned because a view they need could not be read (the scan is incomplete)."""
        self.not_scanned.update(why)
        self.unread = sorted(set(self.unread) | set(why))


@dataclass
class ScanReport:
    """One orphan scan."""

    cluster: str
    started: float
    finished: float = 0.0
    act: bool = False
    dry_run: bool = False
    controller: dict[str, Any] = field(default_factory=dict)
    providers: list[ProviderSummary] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The documented JSON document (docs/orphans-json.md)."""
        return {
            "format": FORMAT,
            "cluster": self.cluster,
            "started": self.started,
            "finished": self.finished,
            "act": self.act,
            "dry_run": self.dry_run,
            "controller": dict(self.controller),
            "providers": [p.to_json() for p in self.providers],
            "findings": [f.to_json() for f in self.findings],
            "complete": self.complete,
            "unread": {p.provider: list(p.unread) for p in self.providers if p.unread},
        }

    @property
    def complete(self) -> bool:
        """Every view that exists was read: only then does "no orphans found" mean none."""
        return not any(p.unread for p in self.providers)

    def incomplete_line(self) -> str:
        """One line naming what was not scanned because a view was unread (empty when complete)."""
        parts = [f"{p.provider} ({', '.join(p.unread)})" for p in self.providers if p.unread]
        return f"orphan scan incomplete, not an all-clear: classes not scanned: {'; '.join(parts)}" if parts else ""

    def find(self, ref: str) -> Finding | None:
        """The finding of an object id or instance key."""
        return next((f for f in self.findings if ref in (f.object_id, f.instance_key) and ref), None)


def table(report: ScanReport) -> str:
    """The text form: one line per provider, then one per finding with its outcome."""
    lines: list[str] = []
    ctl = report.controller
    lines.append(f"controller: {'read' if ctl.get('read') else 'unread: ' + str(ctl.get('error', ''))}")
    for p in report.providers:
        skipped = "; ".join(f"class ({c}) not scanned: {why}" for c, why in sorted(p.not_scanned.items()))
        lines.append(
            f"{p.provider}: drift {p.drift}, listing {p.listing}, {p.instances} instances"
            + (f"; {skipped}" if skipped else "")
            + ("; breaker OPEN" if p.breaker.get("open") else "")
        )
    if not report.findings and report.complete:
        lines.append("no orphans found")
    elif not report.findings:
        lines.append("nothing found in the views that were read; not an all-clear: the scan is incomplete")
    for f in report.findings:
        ref = f.object_id or f.instance_key
        key = f" ({f.instance_key})" if f.instance_key and f.instance_key != ref else ""
        lines.append(
            f"({f.cls}) {f.provider} {ref}{key} {f.name or '-'}  launched {f.launch_time or '?'}  "
            f"{f.action}: {f.outcome}" + (f" ({f.reason})" if f.reason else "")
        )
    return "\n".join(printable(line) for line in lines)  # cloud names and reasons: one line each
