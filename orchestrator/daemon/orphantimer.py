"""When the daemon runs its orphan scan: on ``policy.orphans.interval``, and once after a failover.

Pure (no I/O, an injected ``now``), tested in tests/unit/daemon/test_daemon_orphan_timer.py.

* The first scan is due right after the first pass (a restarted daemon looks for leaks at
  once); each next one ``interval`` after the previous one *ended* (a scan longer than the
  interval is never followed by another at once).
* A new controller term (a failover or a restart; the link reports it, the controller's status
  says when it started) schedules one scan for ``term_started + settle_window`` (plus a second,
  so the guard's own comparison has surely passed): the first moment the settle-window guard
  lets automatic actions through. A term the daemon sees first at its start is waited for only
  while its window still runs (an old term, or one whose start is not known, needs no extra scan).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

# Past the settle window by this much, so the guard's ``now - started < window`` is surely false.
SETTLE_MARGIN: Final = 1.0
INTERVAL: Final = "interval"
FAILOVER: Final = "failover"
START: Final = "start"


@dataclass
class OrphanTimer:
    """The next interval scan, the pending post-failover scan and the last term seen."""

    interval: float
    settle_window: float
    next_at: float
    settle_at: float | None = None
    term: int = 0
    first: bool = True

    @classmethod
    def at_start(cls, interval: float, settle_window: float, now: float) -> OrphanTimer:
        """A timer whose first scan is due at once."""
        return cls(interval, settle_window, now)

    def due(self, now: float) -> str | None:
        """Why a scan is due now (``start``, ``failover`` or ``interval``), None when none is."""
        if self.settle_at is not None and now >= self.settle_at:
            return FAILOVER
        if now >= self.next_at:
            return START if self.first else INTERVAL
        return None

    def next_due(self) -> tuple[float, str]:
        """When the next scan is due and why."""
        if self.settle_at is not None and self.settle_at <= self.next_at:
            return self.settle_at, FAILOVER
        return self.next_at, START if self.first else INTERVAL

    def scanned(self, started: float, finished: float) -> None:
        """A scan ran (or failed) from ``started`` to ``finished``: the next is ``interval`` later."""
        self.first = False
        self.next_at = finished + self.interval
        if self.settle_at is not None and started >= self.settle_at:
            self.settle_at = None  # this scan ran past the window: it was the post-failover one

    def observe_term(self, term: int, started: float, now: float) -> float | None:
        """The controller's term as read now (``started`` 0: not reported); the time of the
        post-failover scan it schedules, None when it schedules none."""
        if term <= 0 or term == self.term:
            return None
        seen_before, self.term = self.term > 0, term
        if not seen_before and started <= 0:
            return None  # found at start with no known start: nothing says a window still runs
        # Not reported: the window is counted from now, which is never earlier than the term's start.
        at = (started if started > 0 else now) + self.settle_window + SETTLE_MARGIN
        if at <= now:
            if not seen_before:
                return None  # an old term found at start: its window passed long ago
            at = now  # a failover noticed late (the link was away): the window passed already
        self.settle_at = at  # a newer failover restarts the window
        return at

    def reconfigure(self, interval: float, settle_window: float) -> None:
        """A reload: the next interval scan counts the new interval from the same last scan."""
        if not self.first:
            self.next_at += interval - self.interval
        if self.settle_at is not None:
            self.settle_at += settle_window - self.settle_window
        self.interval, self.settle_window = interval, settle_window

    def to_json(self) -> dict[str, Any]:
        """The status file's scheduling fields (``orphans`` member)."""
        at, why = self.next_due()
        return {
            "interval": self.interval,
            "settle_window": self.settle_window,
            "term": self.term,
            "next_scan": at,
            "next_reason": why,
            "failover_scan": self.settle_at,
        }
