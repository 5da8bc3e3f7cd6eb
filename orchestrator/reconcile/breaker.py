"""The circuit breaker of a template: stop requesting hosts that fail to bootstrap or join.

``policy.breaker.failures`` bootstrap or join failures of one template within
``policy.breaker.window`` (with no success in between: a success clears the count) open its
breaker. While open, the scale-out policy asks for no host of the template; status and the
audit show why. It closes by ``xceprov breaker reset TEMPLATE`` (:meth:`Breakers.reset`) or
half-opens after ``policy.breaker.cool_off``: one more request goes out, and the next outcome
decides (a failure reopens it at once, a success closes it).

The state lives in ``<state_dir>/breakers.json`` (0600, replaced atomically and durably; with
``terraform.backend: pg`` the cluster's row of the shared store), so a restarted daemon keeps a
template stopped. The document is the truth: a :class:`Breakers` reads it again whenever another
process replaced it (``xceprov breaker reset`` while the daemon runs, another orchestrator's
template) before answering, and records every change over the document as it is at that moment,
in turn with every other writer (``Document.update``), so neither a reset nor another
orchestrator's breaker is ever undone by this one's older copy.
Times are wall-clock seconds (the caller's injected clock): they must mean the same after a
reboot, which a monotonic clock does not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, Literal

from orchestrator.model.config import BreakerSettings
from orchestrator.reconcile.statefile import EntryFormat
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

        def step(old: BreakerState) -> BreakerState:
            recent = (*(t for t in old.failures if t > now - self.settings.window), now)
            position = old.position_at(now, self.settings)
            if position == Position.HALF_OPEN or (
                position == Position.CLOSED and len(recent) >= self.settings.failures
            ):
                why = f"{len(recent)} {kind} failures within {self.settings.window:g}s; last: {detail}"
                if position == Position.HALF_OPEN:
                    why = f"{kind} failure after the cool-off; last: {detail}"
                return BreakerState(template, Position.OPEN, recent, now, why)
            return replace(old, failures=recent)

        return self._change(template, step)

    def success(self, template: str, now: float) -> BreakerState:
        """A host of ``template`` joined: failures are forgotten; a half-open breaker closes."""

        def step(old: BreakerState) -> BreakerState:
            if old.position_at(now, self.settings) == Position.OPEN:
                return old  # a late join of a host requested before the breaker opened changes nothing
            return BreakerState(template)

        return self._change(template, step)

    def reset(self, template: str) -> BreakerState:
        """``xceprov breaker reset TEMPLATE``: close the breaker and forget its failures."""
        return self._change(template, lambda _old: BreakerState(template))

    def _change(self, template: str, step: Callable[[BreakerState], BreakerState]) -> BreakerState:
        """``step`` applied to the breaker of ``template`` as the document holds it at the write,
        in turn with every other writer (a daemon's failure, another orchestrator's template,
        a reset by hand): none of them is lost to an older copy. The new state."""
        done: list[BreakerState] = []

        def change(states: dict[str, BreakerState]) -> dict[str, BreakerState] | None:
            old = states.get(template, BreakerState(template))
            new = step(old)
            done[:] = [new]
            if new == old:
                return None
            changed = {t: s for t, s in states.items() if t != template}
            if new != BreakerState(template):
                changed[template] = new
            return changed

        body = self.document.update(_ENTRIES.step(self.document, change))
        # Memory follows the document only once it holds the change.
        self._states = _ENTRIES.entries(self.document, body)
        self._seen = body
        return done[0]


def _to_json(state: BreakerState) -> dict[str, Any]:
    doc = asdict(state)
    doc["position"] = state.position.value
    doc["failures"] = list(state.failures)
    del doc["template"]
    return doc


def _read(document: Document, raw: bytes) -> dict[str, BreakerState]:
    return _ENTRIES.entries(document, raw)


def _from_json(template: str, s: Any) -> BreakerState:
    return BreakerState(
        template=template,
        position=Position(s["position"]),
        failures=tuple(float(x) for x in s["failures"]),
        opened_at=None if s["opened_at"] is None else float(s["opened_at"]),
        reason=str(s["reason"]),
    )


_ENTRIES: Final = EntryFormat(
    _FORMAT, "breakers", _from_json, _to_json, "breaker file", "removing closes every breaker"
)
