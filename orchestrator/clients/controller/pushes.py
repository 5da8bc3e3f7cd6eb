"""The bounded push queue between the I/O thread and the push thread (``ctl-push``).

The I/O thread must never wait for a callback, and a controller that pushes faster than the
callbacks run must not make the queue grow without bound. The policy, per push:

- ``demand``: one slot holding the newest snapshot by ``(term, seq)``. Snapshots are
  level-triggered (each is the whole picture), so a newer one supersedes a waiting older one
  and nothing is lost by dropping the older.
- ``hostEvent``: first in, first out, at most ``max_host_events`` waiting. Events are not level
  pictures, so none is dropped silently: when the queue is full, :meth:`PushQueue.put_host_event`
  refuses and the link drops the connection; the rejoin and resync that follow (``hostStatus``)
  are the protocol's recovery for pushes lost on a connection drop.
- ``leaseRevoked`` never enters this queue: the I/O thread applies it at once.
"""

from __future__ import annotations

import collections
import threading
from typing import Final

from orchestrator.clients.controller.types import DemandSnapshot, HostEvent

DEFAULT_MAX_HOST_EVENTS: Final = 1024


class PushQueue:
    """The newest waiting demand snapshot and at most ``max_host_events`` host events."""

    def __init__(self, max_host_events: int = DEFAULT_MAX_HOST_EVENTS) -> None:
        if max_host_events < 1:
            raise ValueError("max_host_events must be >= 1")
        self.max_host_events = max_host_events
        self._cond = threading.Condition()
        self._demand: DemandSnapshot | None = None
        self._events: collections.deque[HostEvent] = collections.deque()
        self._closed = False
        self.superseded = 0  # demand snapshots replaced while waiting (for the logs and tests)

    def put_demand(self, snapshot: DemandSnapshot) -> None:
        """Offer a snapshot: it waits unless a newer one already does (then it is dropped)."""
        with self._cond:
            waiting = self._demand
            if waiting is not None:
                self.superseded += 1
                if snapshot.order() <= waiting.order():
                    return
            self._demand = snapshot
            self._cond.notify()

    def put_host_event(self, event: HostEvent) -> bool:
        """Queue a host event; False (nothing queued) when ``max_host_events`` already wait."""
        with self._cond:
            if len(self._events) >= self.max_host_events:
                return False
            self._events.append(event)
            self._cond.notify()
            return True

    def get(self, timeout: float | None = None) -> DemandSnapshot | HostEvent | None:
        """The next push (the waiting demand snapshot first); None once closed or on timeout."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._closed or self._demand is not None or self._events, timeout):
                return None
            if self._closed:
                return None
            if self._demand is not None:
                snapshot, self._demand = self._demand, None
                return snapshot
            return self._events.popleft()

    def waiting(self) -> tuple[DemandSnapshot | None, int]:
        """The waiting demand snapshot and the number of waiting host events."""
        with self._cond:
            return self._demand, len(self._events)

    def close(self) -> None:
        """Wake the consumer; every later ``get`` returns None."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
