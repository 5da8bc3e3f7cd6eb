"""Several orchestrators over one demand: one of them decides a scale-out at a time.

Daemons sharing a database (``terraform.backend: pg``, docs/daemon.md "Several daemons") read
the same demand and each holds some of the providers. Without coordination, two passes that
start together both see the whole gap and both fill it on their own providers: twice the hosts.
So the scale-out phase runs under a cluster-wide lock of the shared store: a pass that cannot
take it at once skips its scale-out (the next pass tries again), and a pass that takes it reads
every provider's facts again first, so the intents another daemon committed under the lock count
as hosts on their way (the gap's ``awaited``). The lock is held until the phase's ops end, and
dies with the holder's connection (a daemon killed mid-burst frees it at once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from orchestrator.errors import XceprovError
from orchestrator.reconcile.passctx import PassContext
from orchestrator.reconcile.results import Skipped

R = TypeVar("R")


class ScaleOutLock(Protocol):
    """The cluster-wide lock of the scale-out decision (the shared store's)."""

    def try_acquire(self) -> bool:
        """Take it without waiting: False when another orchestrator holds it; an error when the
        store cannot be asked."""
        ...

    def release(self) -> None:
        """Let it go."""
        ...


def coordinated(
    lock: ScaleOutLock | None,
    ctx: PassContext,
    providers: Iterable[str],
    decide: Callable[[PassContext], R],
) -> R | Skipped:
    """``decide(ctx)`` under ``lock`` with every provider's facts read again (as is without a lock);
    the phase skipped, saying why, when the lock is another's or cannot be asked for."""
    if lock is None:
        return decide(ctx)
    try:
        taken = lock.try_acquire()
    except XceprovError as exc:
        return Skipped(f"the shared store's scale-out lock could not be asked for: {exc}")
    if not taken:
        return Skipped("another orchestrator is scaling out (the shared store's scale-out lock); next pass")
    try:
        for provider in providers:
            ctx.stale(provider)  # what the previous holder committed counts as on its way
        return decide(ctx)
    finally:
        lock.release()
