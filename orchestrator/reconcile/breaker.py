"""The circuit breaker of a template: stop requesting hosts that fail to bootstrap or join.

``policy.breaker.failures`` bootstrap or join failures of one template within
``policy.breaker.window`` (with no success in between: a success clears the count) open its
breaker. While open, the scale-out policy asks for no host of the template; status and the
audit show why. It closes by ``xceprov breaker reset TEMPLATE`` (:meth:`Breakers.reset`) or
half-opens after ``policy.breaker.cool_off``: one more request goes out, and the next outcome
decides (a failure reopens it at once, a success closes it).

The state lives in ``<state_dir>/breakers.json`` (0600, replaced atomically and durably), so a
restarted daemon keeps a template stopped. The file is the truth: a :class:`Breakers` reads it
again whenever another process replaced it (``xceprov breaker reset`` while the daemon runs),
before answering or recording anything, so a reset is never undone by the daemon's older copy.
Times are wall-clock seconds (the caller's injected clock): they must mean the same after a
reboot, which a monotonic clock does not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, Literal

from orchestrator.model.config import BreakerSettings
from orchestrator.reconcile.statefile import parse_entries, write_entries
from orchestrator.workspace.documents import Document, Documents, LocalDocuments, SnapshotDocuments

BREAKERS_FILE: Final = "breakers.json"
_FORMAT: Final = 1
# What can trip a breaker: a host whose bootstrap failed, or one that never joined.
FailureKind = Literal["bootstrap", "join"]


class Position(StrEnum):
    """Where a breaker stands."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass(frozen=True)
class BreakerState:
    """One template's breaker, as ``xceprov status`` and the audit show it."""

    template: str
    position: Position = Position.CLOSED
    # Failure times (wall seconds) inside the window, oldest first.
    failures: tuple[float, ...] = ()
    opened_at: float | None = None
    reason: str = ""

    def reopens_at(self, settings: BreakerSettings) -> float | None:
        """When an open breaker half-opens by itself (None when it is not open)."""
        return None if self.opened_at is None else self.opened_at + settings.cool_off

    def position_at(self, now: float, settings: BreakerSettings) -> Position:
        """The position at ``now``: an open breaker past its cool-off is half-open."""
        if self.position == Position.OPEN and self.opened_at is not None and now >= self.opened_at + settings.cool_off:
            return Position.HALF_OPEN
        return self.position

    def evidence(self, now: float, settings: BreakerSettings) -> dict[str, Any]:
        """JSON-ready: position now, failures in the window, when it opened and reopens, why."""
        return {
            "template": self.template,
            "position": self.position_at(now, settings).value,
            "failures": len(self.failures),
            "threshold": settings.failures,
            "window": settings.window,
            "opened_at": self.opened_at,
            "reopens_at": self.reopens_at(settings),
            "reason": self.reason,
        }


@dataclass
class Breakers:
    """Every template's breaker, kept in ``document``."""

    document: Document
    settings: BreakerSettings
    _states: dict[str, BreakerState] = field(default_factory=dict)
    # The document's content as last read or written; None: no document. Any other writer's
    # change shows as other content.
    _seen: bytes | None = None

    @classmethod
    def load(cls, state_dir: Path, settings: BreakerSettings, documents: Documents | None = None) -> Breakers:
        """The breakers kept under ``state_dir`` (or in ``documents``; none yet when absent)."""
        store = documents if documents is not None else LocalDocuments(Path(state_dir))
        breakers = cls(Document(store, BREAKERS_FILE), settings)
        breakers._fresh()
        return breakers

    def _fresh(self) -> None:
        """Read the document again when someone else replaced (or removed) it since it was last seen."""
        seen = self.document.read()
        if seen != self._seen or (seen is None and self._states):
            self._states = _read(self.document, seen) if seen is not None else {}
            self._seen = seen

    def snapshot(self) -> Breakers:
        """The breakers as last read or written, answering without reading the document again
        (a status written while the shared store is away shows them as they were)."""
        document = Document(SnapshotDocuments({self.document.name: self._seen}), self.document.name)
        return Breakers(document, self.settings, dict(self._states), self._seen)

    def state(self, template: str) -> BreakerState:
        """The breaker of ``template`` (closed when nothing was recorded)."""
        self._fresh()
        return self._states.get(template, BreakerState(template))

    def states(self) -> list[BreakerState]:
        """Every recorded breaker, by template."""
        self._fresh()
        return [self._states[t] for t in sorted(self._states)]

    def allows(self, template: str, now: float) -> bool:
        """Whether hosts of ``template`` may be requested now (closed or half-open)."""
        return self.state(template).position_at(now, self.settings) != Position.OPEN

    def failure(self, template: str, kind: FailureKind, detail: str, now: float) -> BreakerState:
        """Record a bootstrap or join failure of a host of ``template``; returns the new state."""
        old = self.state(template)
        recent = (*(t for t in old.failures if t > now - self.settings.window), now)
        position = old.position_at(now, self.settings)
        if position == Position.HALF_OPEN or (position == Position.CLOSED and len(recent) >= self.settings.failures):
            why = f"{len(recent)} {kind} failures within {self.settings.window:g}s; last: {detail}"
            if position == Position.HALF_OPEN:
                why = f"{kind} failure after the cool-off; last: {detail}"
            new = BreakerState(template, Position.OPEN, recent, now, why)
        else:
            new = replace(old, failures=recent)
        return self._save(new)

    def success(self, template: str, now: float) -> BreakerState:
        """A host of ``template`` joined: failures are forgotten; a half-open breaker closes."""
        old = self.state(template)
        if old.position_at(now, self.settings) == Position.OPEN:
            return old  # a late join of a host requested before the breaker opened changes nothing
        if old == BreakerState(template):
            return old
        return self._save(BreakerState(template))

    def reset(self, template: str) -> BreakerState:
        """``xceprov breaker reset TEMPLATE``: close the breaker and forget its failures."""
        self._fresh()  # the other templates' records as they are on disk now
        return self._save(BreakerState(template))

    def _save(self, state: BreakerState) -> BreakerState:
        states = dict(self._states)
        if state == BreakerState(state.template):
            states.pop(state.template, None)
        else:
            states[state.template] = state
        write_entries(self.document, _FORMAT, "breakers", {t: _to_json(s) for t, s in states.items()})
        self._states = states  # only once the document holds it: memory never runs ahead of it
        self._seen = self.document.read()
        return state


def _to_json(state: BreakerState) -> dict[str, Any]:
    doc = asdict(state)
    doc["position"] = state.position.value
    doc["failures"] = list(state.failures)
    del doc["template"]
    return doc


def _read(document: Document, raw: bytes) -> dict[str, BreakerState]:
    hint = "removing closes every breaker"
    return parse_entries(document, raw, _FORMAT, "breakers", _from_json, "breaker file", hint)


def _from_json(template: str, s: Any) -> BreakerState:
    return BreakerState(
        template=template,
        position=Position(s["position"]),
        failures=tuple(float(x) for x in s["failures"]),
        opened_at=None if s["opened_at"] is None else float(s["opened_at"]),
        reason=str(s["reason"]),
    )
