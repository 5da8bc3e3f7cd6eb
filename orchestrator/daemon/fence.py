"""The daemon's fence: the provider's lease, closed early enough for a SIGTERM to park in time.

After a SIGTERM the op in flight may go on (a burst that finishes leaves nothing to resume), but
only until a little before ``daemon.stop_timeout`` ends: then this fence closes, the executor's
apply sees ``valid()`` turn false and gives Terraform its one graceful interrupt (the calls in
flight finish, the state is written), and no further fact is committed. The op stays open, its
intent fact makes the next start resume it. The time kept back for that interrupt is the
*park allowance*: a third of the bound, at most 30 s (a Terraform interrupt with a few hundred
calls in flight was seen to take well under that on the simulated cloud).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from orchestrator.daemon.timeouts import NamedTimeout
from orchestrator.errors import LeaseLost
from orchestrator.model.facts import Epoch
from orchestrator.ops.fence import Fence

PARK_ALLOWANCE_MAX = 30.0

# ``(asked at, bound)`` of a stop in monotonic seconds, None while not stopping (Lifecycle.stop_window).
StopWindow = Callable[[], tuple[float, float] | None]


def park_allowance(bound: float) -> float:
    """Seconds of the stop bound kept back for an interrupted apply to write its state."""
    return min(PARK_ALLOWANCE_MAX, bound / 3.0)


class StopFence:
    """``leases`` (the lease keeper), closed from ``stop_timeout − park_allowance`` after a stop on."""

    def __init__(self, leases: Fence, stop_window: StopWindow, clock: Callable[[], float] = time.monotonic) -> None:
        self.leases = leases
        self._window = stop_window
        self._clock = clock

    def closes_at(self) -> float | None:
        """When the fence closes for the stop (monotonic seconds); None while not stopping."""
        window = self._window()
        if window is None:
            return None
        asked, bound = window
        return asked + bound - park_allowance(bound)

    def closed(self) -> bool:
        """Whether the stop has closed the fence (whatever the leases say)."""
        at = self.closes_at()
        return at is not None and self._clock() >= at

    def gate(self, provider: str) -> Epoch:
        """The lease's epoch; ``LeaseLost`` once the stop closed the fence or the lease is not valid."""
        if self.closed():
            raise LeaseLost(
                f"provider {provider!r}: the daemon is stopping and its {NamedTimeout.STOP_TIMEOUT.value} "
                "is nearly over: work in flight is parked (it resumes at the next start)"
            )
        return self.leases.gate(provider)

    def valid(self, provider: str) -> bool:
        """Whether ``gate(provider)`` would pass right now."""
        return not self.closed() and self.leases.valid(provider)


# Why the shared store refuses mutations now (None while it answers): ``Membership.closed_reason``.
StoreReason = Callable[[], str | None]


class StoreFence:
    """``leases``, closed for every provider while the shared store does not answer (``members.py``).

    With ``terraform.backend: pg`` the daemon's share of the providers, the desired sets and the
    loop's state live in the database: a daemon that cannot heartbeat is counted as gone by the
    others and cannot write what a successor needs, so it mutates nothing until the store answers.
    """

    def __init__(self, leases: Fence, closed: StoreReason) -> None:
        self.leases = leases
        self._closed = closed

    def gate(self, provider: str) -> Epoch:
        """The lease's epoch; ``LeaseLost`` naming the store's outage while it lasts."""
        reason = self._closed()
        if reason is not None:
            raise LeaseLost(f"provider {provider!r}: {reason}: no mutation until it answers")
        return self.leases.gate(provider)

    def valid(self, provider: str) -> bool:
        """Whether ``gate(provider)`` would pass right now."""
        return self._closed() is None and self.leases.valid(provider)
