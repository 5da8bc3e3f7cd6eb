"""The history of scale-out reasons: ``<state_dir>/reasons.jsonl``, what ``xceprov explain`` reads.

One JSON line per template whose reasons changed since the line before it (and one per launch):
``{"time", "template", "reasons": [...], "summary"}``; ``reasons: []`` says the template's
demand is met (or gone). A standing reason (a provider in backoff pass after pass) is written
once. Bounded: past :data:`MAX_LINES` lines or :data:`MAX_BYTES` bytes the file is rewritten with
its newest half, so it never grows without end. Written by the daemon only (one writer per state
directory: the daemon's state lock), read by anyone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from orchestrator.durable import PRIVATE_FILE, write_bytes_atomic
from orchestrator.reconcile.reasons import LAUNCHED, Reason, primary

JOURNAL: Final = "reasons.jsonl"
MAX_LINES: Final = 5000
MAX_BYTES: Final = 2 * 1024 * 1024


def journal_path(state_dir: Path) -> Path:
    """Where the journal of ``state_dir`` lives."""
    return Path(state_dir) / JOURNAL


@dataclass(frozen=True)
class JournalEntry:
    """One line: a template's reasons from ``time`` on."""

    time: float
    template: str
    reasons: tuple[Reason, ...]

    @property
    def summary(self) -> str:
        """One line naming every reason, or that the demand is met."""
        first = primary(self.template, self.reasons)
        return first.detail if first is not None else "demand met: nothing held back"

    def to_json(self) -> dict[str, Any]:
        """The line's document."""
        return {
            "time": self.time,
            "template": self.template,
            "reasons": [r.to_json() for r in self.reasons],
            "summary": self.summary,
        }


@dataclass
class ReasonJournal:
    """Appends the reasons that changed (module docstring); keeps the last written per template."""

    state_dir: Path
    max_lines: int = MAX_LINES
    max_bytes: int = MAX_BYTES
    _last: dict[str, tuple[Reason, ...]] | None = None
    _lines: int = field(default=0)

    def record(self, now: float, reasons: Mapping[str, Sequence[Reason]]) -> list[JournalEntry]:
        """Write the templates whose reasons changed (or that launched); the entries written."""
        if self._last is None:  # after a restart: what the journal said last is not said again
            self._last = {}
            for entry in read_journal(self.state_dir):
                self._last[entry.template] = entry.reasons
                self._lines += 1
        written: list[JournalEntry] = []
        for template in sorted(set(self._last) | set(reasons)):
            now_reasons = tuple(reasons.get(template, ()))
            before = self._last.get(template, ())
            if now_reasons == before and not any(r.code == LAUNCHED for r in now_reasons):
                continue
            written.append(JournalEntry(now, template, now_reasons))
            if now_reasons:
                self._last[template] = now_reasons
            else:
                self._last.pop(template, None)  # met: said once
        if written:
            self._append(written)
        return written

    def _append(self, entries: list[JournalEntry]) -> None:
        path = journal_path(self.state_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(json.dumps(e.to_json(), sort_keys=True) + "\n" for e in entries).encode()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE)
        try:
            os.write(fd, data)  # one write: a reader never sees half a batch
        finally:
            os.close(fd)
        self._lines += len(entries)
        if self._lines > self.max_lines or path.stat().st_size > self.max_bytes:
            self._prune(path)

    def _prune(self, path: Path) -> None:
        """Keep the newest half of both bounds."""
        lines = path.read_bytes().splitlines(keepends=True)
        kept: list[bytes] = []
        size = 0
        for line in reversed(lines):
            if len(kept) >= self.max_lines // 2 or size + len(line) > self.max_bytes // 2:
                break
            kept.append(line)
            size += len(line)
        kept.reverse()
        write_bytes_atomic(path, b"".join(kept))
        self._lines = len(kept)


def read_journal(state_dir: Path, template: str | None = None, since: float | None = None) -> list[JournalEntry]:
    """The journal's entries, oldest first (of ``template`` only, from ``since`` on, when given);
    a line that is not an entry (a torn last line) is skipped. No file: none."""
    path = journal_path(state_dir)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    out: list[JournalEntry] = []
    for line in text.splitlines():
        entry = _entry(line)
        if entry is None or (template is not None and entry.template != template):
            continue
        if since is not None and entry.time < since:
            continue
        out.append(entry)
    return out


def _entry(line: str) -> JournalEntry | None:
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("time"), int | float) or not doc.get("template"):
        return None
    found = doc.get("reasons")
    reasons = tuple(Reason.from_json(r) for r in found if isinstance(r, dict)) if isinstance(found, list) else ()
    return JournalEntry(float(doc["time"]), str(doc["template"]), reasons)
