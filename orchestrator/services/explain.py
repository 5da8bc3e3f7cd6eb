"""``xceprov explain [TEMPLATE]``: why the daemon launched what it did, or nothing, lately.

The current reasons are the daemon's last pass's (its status file, ``reasons``); the history is
the journal the daemon keeps in ``<state_dir>/reasons.jsonl`` (``reconcile/reasonjournal.py``:
a line per template whose reasons changed, bounded). Both are local files: no controller is
asked. docs/daemon.md ("Why nothing launched") lists the reason codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.configfile import LoadedConfig
from orchestrator.errors import UsageError
from orchestrator.model.text import printable
from orchestrator.reconcile.reasonjournal import JournalEntry, read_journal
from orchestrator.reconcile.reasons import Reason, clock_time, primary, reasons_from_json, reasons_json
from orchestrator.workspace.daemonstatus import read_status


@dataclass(frozen=True)
class Explanation:
    """The current reasons per template and the history, oldest first."""

    current: dict[str, list[Reason]]
    history: list[JournalEntry]
    since: float | None  # unix seconds the history starts at (None: all the journal keeps)
    daemon: bool = True  # False: no daemon ever wrote a status file here (no current reasons)

    def to_json(self) -> dict[str, Any]:
        """``explain --json``."""
        return {
            "current": reasons_json(self.current),
            "history": [e.to_json() for e in self.history],
            "since": self.since,
        }

    def text(self) -> str:
        """``explain`` as text: the current reasons, then the history with UTC times."""
        lines = ["now (the daemon's last pass)"]
        if not self.daemon:
            lines.append("  no daemon has run with this state_dir")
        elif not self.current:
            lines.append("  nothing wanted or held back")
        for template, reasons in sorted(self.current.items()):
            first = primary(template, reasons)
            lines.append(f"  {template}: {first.detail if first is not None else '-'}")
        lines += ["", "history (UTC, oldest first)"]
        if not self.history:
            lines.append("  (none recorded)")
        for entry in self.history:
            lines.append(f"  {clock_time(entry.time)}  {entry.template}: {entry.summary}")
        return "\n".join(printable(line) for line in lines)


def explain(loaded: LoadedConfig, template: str | None = None, start: float | None = None) -> Explanation:
    """The explanation of ``template`` (every template when None), its history from the Unix
    time ``start`` on (None: all the journal keeps)."""
    state_dir = loaded.config.state_dir
    found = read_status(state_dir)
    current = reasons_from_json(found.document.get("reasons")) if found is not None else {}
    history = read_journal(state_dir, template, start)
    if template is not None:
        current = {t: r for t, r in current.items() if t == template}
        if template not in loaded.config.templates and not history and not current:
            known = ", ".join(sorted(loaded.config.templates)) or "none"
            raise UsageError(f"{loaded.source}: templates.{template}: no such template (known: {known})")
    return Explanation(current, history, start, daemon=found is not None)
