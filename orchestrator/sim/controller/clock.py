"""The controller's clocks, injected so tests control time.

``monotonic`` rules lease validity, TTLs, grace and work durations; ``wall`` (unix seconds) is
only reported (idle-since, commit times) and compared with join deadlines, which are wall times.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


def to_ms(seconds: float) -> int:
    """Seconds as whole milliseconds (the protocol's unit)."""
    return round(seconds * 1000)


class Clock(Protocol):
    """What the controller needs to know about time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    def wall(self) -> float:
        """Unix time in seconds."""
        ...


class SystemClock:
    """The real clocks."""

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    def wall(self) -> float:
        """``time.time()``."""
        return time.time()


class FakeClock:
    """A clock that moves only when told to (tests)."""

    def __init__(self, monotonic: float = 1000.0, wall: float = 1_800_000_000.0) -> None:
        self._lock = threading.Lock()
        self._mono = monotonic
        self._wall = wall

    def monotonic(self) -> float:
        """The current fake monotonic time."""
        with self._lock:
            return self._mono

    def wall(self) -> float:
        """The current fake wall time."""
        with self._lock:
            return self._wall

    def advance(self, seconds: float) -> None:
        """Move both clocks forward."""
        with self._lock:
            self._mono += seconds
            self._wall += seconds
