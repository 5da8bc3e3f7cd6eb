"""An in-memory shared store for the membership tests: member rows, an outage switch."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Row:
    instance: str
    label: str
    configured: tuple[str, ...]
    held: Mapping[str, str]
    age_s: float


@dataclass
class FakeStore:
    """Members with heartbeat times on ``clock``; ``down`` makes every call fail as psycopg would."""

    clock: Callable[[], float]
    down: str = ""
    rows: dict[str, tuple[str, tuple[str, ...], dict[str, str], float]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _check(self, call: str) -> None:
        with self.lock:
            self.calls.append(call)
        if self.down:
            raise ConnectionError(self.down)

    def heartbeat(
        self,
        instance: str,
        label: str,
        configured: Sequence[str],
        held: Mapping[str, str],
        live_for: float | None = None,
    ) -> None:
        self._check("heartbeat")
        with self.lock:
            self.rows[instance] = (label, tuple(configured), dict(held), self.clock())

    def put(self, instance: str, configured: Sequence[str], held: Mapping[str, str] | None = None) -> None:
        """Another member's heartbeat."""
        with self.lock:
            self.rows[instance] = (f"label-{instance}", tuple(configured), dict(held or {}), self.clock())

    def members(self, live_within: float) -> list[Row]:
        self._check("members")
        now = self.clock()
        with self.lock:
            return [
                Row(instance, label, configured, held, now - at)
                for instance, (label, configured, held, at) in sorted(self.rows.items())
                if now - at < live_within
            ]

    def leave(self, instance: str) -> None:
        self._check("leave")
        with self.lock:
            self.rows.pop(instance, None)

    def close(self) -> None:
        with self.lock:
            self.calls.append("close")
