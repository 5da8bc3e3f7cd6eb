"""The virtual clock of a replay: every part of the model world and the reconcile pass read it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class VirtualClock:
    """Unix seconds that move only when the replay moves them (``advance``, ``sleep``, ``to``).

    Callable like the daemon's clock (``Clock``); ``sleep`` is what the executor's waits call
    (a drain waiting for a host to close): it moves the clock instead of waiting.
    """

    now: float

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (never back); the new time."""
        self.now += max(0.0, seconds)
        return self.now

    def sleep(self, seconds: float) -> None:
        """``time.sleep`` on the virtual clock."""
        self.advance(seconds)

    def to(self, when: float) -> float:
        """Move forward to ``when`` (a time already passed leaves the clock where it is)."""
        self.now = max(self.now, when)
        return self.now
