"""The lease manager: one lease per provider, renewed every TTL/3, and the gate every mutation passes.

Rules (docs/protocol.md, research seed Q3):

- A lease is valid until ``renew_sent + TTL - margin`` on this process's monotonic clock, where
  ``renew_sent`` is the clock reading taken just *before* the successful acquire/renew request
  was sent. The controller starts its own TTL when it *receives* the request, which is later, so
  our deadline always falls before the controller's: at no instant do two holders both believe
  they hold the lease, as long as both clocks run at the same rate (the margin covers drift).
- Renewals are due ``TTL/3`` after the previous one was sent, made a little earlier by a small
  random jitter so that many providers do not renew in lock-step. A failed renewal (controller
  unreachable, timed out) is retried quickly until the deadline; the lease stays valid until
  then, and not a moment longer.
- ``gate(provider)`` is the one check in front of every mutation (commit of an intent, a
  Terraform apply, a terminate): it returns the epoch to stamp on the action or raises
  ``LeaseLost``. Once the lease lapses, no new cloud call starts; the op stays resumable.
- A revocation push invalidates the lease at once; grants for the revoked epoch arriving late
  (a renewal that crossed the push) are ignored.
- ``want(providers)`` changes which providers are asked for (daemons sharing a database split
  the providers, ``orchestrator/daemon/share.py``): a provider no longer wanted is renewed no
  more and, when held, released cleanly (its gate closes first, then the controller hears the
  release, so its next holder gets it at once); a newly wanted one is asked for at once. The
  caller calls it only while no op of a dropped provider is in flight (the daemon: between passes).
- ``close()`` releases every held lease on a clean shutdown, but only a lease the controller
  granted to this process (``instance``, the join's ``leaseInstance``): a controller that names the
  identity alone as the holder does not tell this process from another of the same certificate,
  and releasing would free the other's lease (docs/protocol.md §5). Such a lease lapses by its TTL.

Each provider gets its own renewal thread, so a slow or timed-out renewal of one provider never
delays another's; the threads do nothing but renew (no Terraform or Ansible work runs on them).
The clock and the wait are injected: tests drive ``step()`` with a fake clock and no threads.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from orchestrator.clients.controller.types import Epoch, LeaseDenied, LeaseGrant
from orchestrator.errors import ControllerError, LeaseLost

log = logging.getLogger(__name__)

Clock = Callable[[], float]
# The note of a lease this manager does not ask for (``want``): another instance is to hold it.
NOT_WANTED = "not asked for: dealt to another instance"
# Called with the provider's name after every change of its lease (grant, denial, failure, revocation).
ChangeListener = Callable[[str], None]


class LeaseTransport(Protocol):
    """What the lease manager needs from the controller link (blocking calls, bounded by a timeout)."""

    def acquire(self, provider: str, previous: Epoch | None) -> LeaseGrant | LeaseDenied:
        """Ask for the provider's lease; ``previous`` is the epoch this instance last held."""
        ...

    def renew(self, provider: str, epoch: Epoch) -> LeaseGrant | LeaseDenied:
        """Renew the lease held under ``epoch``."""
        ...

    def release(self, provider: str, epoch: Epoch) -> None:
        """Give the lease back (clean shutdown)."""
        ...


@dataclass(frozen=True)
class LeaseStatus:
    """One provider's lease as this process sees it (for ``xceprov status``)."""

    provider: str
    held: bool
    epoch: Epoch | None
    ttl: float
    expires_in: float
    holder: str
    last_error: str


@dataclass(frozen=True)
class LeaseRecord:
    """One provider's lease as its renewing side holds it, times on the manager's clock.

    ``valid_until`` derives only from the last *confirmed* renewal: ``renewal_sent + ttl -
    margin``; ``-inf`` when not held. The ``renewal_*`` times are those of that renewal (0 before
    the first grant; ``renewal_due`` is 0 for a first acquire, which had no due time).
    """

    epoch: Epoch | None
    valid_until: float
    ttl: float
    note: str = ""
    renewal_due: float = 0.0
    renewal_sent: float = 0.0
    renewal_confirmed: float = 0.0


@dataclass
class _Lease:
    provider: str
    epoch: Epoch | None = None
    previous: Epoch | None = None
    ttl: float = 0.0
    valid_until: float = -math.inf
    next_due: float = 0.0
    holder: str = ""
    last_error: str = ""
    revoked: Epoch | None = None
    in_flight: bool = False
    reacquire: bool = False
    renewal: tuple[float, float, float] = (0.0, 0.0, 0.0)  # due, sent, confirmed of the last grant
    own: bool = False  # the last grant named this process instance as the holder
    wanted: bool = True  # asked for (want()); a lease not wanted is released and not asked for again


def granted_to(holder: str, instance: str) -> bool:
    """Whether a grant naming ``holder`` was made to the process instance ``instance`` alone
    (any grant counts when no instance is known: a manager of one process, as in tests)."""
    return not instance or holder.endswith("/" + instance)


class LeaseManager:
    """Acquires, renews and releases one lease per provider; ``gate`` fences every mutation."""

    def __init__(
        self,
        transport: LeaseTransport,
        providers: Iterable[str],
        *,
        margin: float,
        holder_id: str = "",
        instance: str = "",
        clock: Clock = time.monotonic,
        rng: random.Random | None = None,
        jitter: float = 0.05,
        retry_interval: float = 1.0,
        on_change: ChangeListener | None = None,
        wanted: Iterable[str] | None = None,
    ) -> None:
        if margin < 0:
            raise ValueError("lease margin must be >= 0")
        self._transport = transport
        self._margin = margin
        self._holder_id = holder_id
        self._instance = instance
        self._clock = clock
        self._rng = rng or random.Random()
        self._jitter = jitter
        self._retry = retry_interval
        self._on_change = on_change
        self._lock = threading.Lock()
        self._leases: dict[str, _Lease] = {p: _Lease(p) for p in providers}
        if wanted is not None:
            asked = set(wanted)
            for lease in self._leases.values():
                lease.wanted = lease.provider in asked
                lease.last_error = "" if lease.wanted else NOT_WANTED
        self._stop = threading.Event()
        self._wake: dict[str, threading.Event] = {p: threading.Event() for p in self._leases}
        self._threads: list[threading.Thread] = []

    # -- the gate ------------------------------------------------------------------------------

    def gate(self, provider: str) -> Epoch:
        """The epoch to stamp on a mutation of ``provider``; raises ``LeaseLost`` when the lease
        is not valid right now. Call it immediately before every cloud call or intent commit."""
        now = self._clock()
        with self._lock:
            lease = self._leases.get(provider)
            if lease is None:
                raise LeaseLost(f"no lease is managed for provider {provider!r}")
            if lease.epoch is None:
                why = f" (held by {lease.holder})" if lease.holder else ""
                why += f": {lease.last_error}" if lease.last_error and not lease.holder else ""
                raise LeaseLost(f"lease for provider {provider!r} is not held{why}")
            if now >= lease.valid_until:
                raise LeaseLost(
                    f"lease for provider {provider!r} lapsed {now - lease.valid_until:.1f}s ago "
                    f"(epoch {lease.epoch}; last error: {lease.last_error or 'none'})"
                )
            return lease.epoch

    def valid(self, provider: str) -> bool:
        """Whether ``gate(provider)`` would pass right now."""
        try:
            self.gate(provider)
        except LeaseLost:
            return False
        return True

    def status(self) -> list[LeaseStatus]:
        """Every managed lease, sorted by provider."""
        now = self._clock()
        with self._lock:
            return [
                LeaseStatus(
                    provider=lease.provider,
                    held=lease.epoch is not None and now < lease.valid_until,
                    epoch=lease.epoch,
                    ttl=lease.ttl,
                    expires_in=max(0.0, lease.valid_until - now) if lease.epoch is not None else 0.0,
                    holder=self._holder_id if lease.epoch is not None else lease.holder,
                    last_error=lease.last_error,
                )
                for lease in sorted(self._leases.values(), key=lambda x: x.provider)
            ]

    def record(self, provider: str) -> LeaseRecord:
        """The provider's lease: its absolute deadline on the manager's clock (``-inf`` when not
        held), the holder or last error as a note, and the times of the last confirmed renewal."""
        with self._lock:
            lease = self._leases[provider]
            due, sent, confirmed = lease.renewal
            return LeaseRecord(
                lease.epoch, lease.valid_until, lease.ttl, lease.holder or lease.last_error, due, sent, confirmed
            )

    def _changed(self, provider: str) -> None:
        if self._on_change is not None:
            self._on_change(provider)

    # -- events from the link ------------------------------------------------------------------

    def revoke(self, provider: str, epoch: Epoch | None = None) -> None:
        """A revocation push: invalidate at once (only the named epoch, when one is given)."""
        with self._lock:
            lease = self._leases.get(provider)
            if lease is None or (epoch is not None and lease.epoch is not None and epoch != lease.epoch):
                return
            log.warning("lease for provider %s revoked (epoch %s)", provider, epoch or lease.epoch)
            lease.revoked = epoch or lease.epoch
            lease.previous = lease.epoch or lease.previous
            lease.epoch = None
            lease.valid_until = -math.inf
            lease.last_error = "revoked by the controller"
            lease.next_due = self._clock() + self._retry
        self._changed(provider)
        self._wake[provider].set()

    def kick(self, reacquire: bool = False) -> None:
        """Renew every lease now; with ``reacquire`` (after a reconnect, docs/protocol.md §8) held
        leases are re-acquired instead: same term, the same epoch comes back; a new term re-grants
        the previous holder at once with a new epoch. Validity is unchanged until the answer."""
        now = self._clock()
        with self._lock:
            for lease in self._leases.values():
                lease.next_due = min(lease.next_due, now)
                lease.reacquire = lease.reacquire or reacquire
        for event in self._wake.values():
            event.set()

    def want(self, providers: Iterable[str]) -> None:
        """Ask for exactly ``providers`` from now on (managed ones; others are ignored): the ones
        dropped are released at their next step; the ones added, and every wanted one not held,
        are asked for at once."""
        asked = set(providers)
        unknown = asked - set(self._leases)
        if unknown:
            log.warning("asked to hold leases of providers not managed here: %s", ", ".join(sorted(unknown)))
        now = self._clock()
        due = []
        with self._lock:
            for lease in self._leases.values():
                wanted = lease.provider in asked
                if wanted != lease.wanted:
                    log.info("lease for provider %s %s", lease.provider, "wanted here" if wanted else "not wanted here")
                    lease.wanted = wanted
                elif not wanted or lease.epoch is not None:
                    continue
                # Changed, or wanted and not held: asked at once (a denial's retry hint is the
                # holder's remaining TTL, but the holder may just have released it).
                lease.next_due = now
                due.append(lease.provider)
        for provider in due:
            self._wake[provider].set()

    def wanted(self) -> set[str]:
        """The providers asked for."""
        with self._lock:
            return {lease.provider for lease in self._leases.values() if lease.wanted}

    # -- driving -------------------------------------------------------------------------------

    def step(self) -> float:
        """Do every acquire/renew that is due now (sequentially); seconds until the next one is due."""
        for provider in list(self._leases):
            self.step_provider(provider)
        now = self._clock()
        with self._lock:
            return max(0.0, min((x.next_due for x in self._leases.values()), default=math.inf) - now)

    def step_provider(self, provider: str) -> float:
        """Do the provider's acquire/renew when due (its release when no longer wanted); seconds
        until its next one is due."""
        with self._lock:
            lease = self._leases[provider]
            due = lease.next_due
            if self._clock() < due or lease.in_flight:
                return max(0.0, due - self._clock())
            lease.in_flight = True
            wanted = lease.wanted
            epoch = lease.epoch
            previous = lease.previous
            reacquire, lease.reacquire = lease.reacquire, False
        try:
            if not wanted:
                self._let_go(provider, NOT_WANTED)
                return self._due_in(lease)
            sent = self._clock()
            try:
                if epoch is not None and not reacquire:
                    answer: LeaseGrant | LeaseDenied = self._transport.renew(provider, epoch)
                else:
                    answer = self._transport.acquire(provider, previous)
            except ControllerError as exc:
                self._failed(provider, str(exc))
            else:
                self._answered(provider, answer, due, sent)
            self._changed(provider)
        finally:
            with self._lock:
                lease.in_flight = False
                if wanted and not lease.wanted:  # dropped while the request was out: release at the next step
                    lease.next_due = min(lease.next_due, self._clock())
        return self._due_in(lease)

    def _due_in(self, lease: _Lease) -> float:
        with self._lock:
            return max(0.0, lease.next_due - self._clock())

    def _let_go(self, provider: str, note: str | None) -> None:
        """Hold the provider's lease no more: its gate closes (and the listener hears it) before
        the controller is told, so that no instant has two holders passing their gates. Released
        only when still valid and granted to this process (see ``close``); a lease wanted again
        meanwhile is left alone."""
        with self._lock:
            lease = self._leases[provider]
            if note is not None and lease.wanted:
                return
            epoch = lease.epoch if self._clock() < lease.valid_until else None
            if epoch is not None and not lease.own:
                log.warning(
                    "lease of provider %s not released: the controller granted it to the certificate "
                    "identity, not to this process alone; it lapses by its TTL",
                    provider,
                )
                epoch = None
            lease.previous = lease.epoch or lease.previous
            lease.epoch = None
            lease.valid_until = -math.inf
            if note is not None:
                lease.holder = ""
                lease.last_error = note
                lease.next_due = math.inf  # want() asks again
        self._changed(provider)
        if epoch is not None:
            try:
                self._transport.release(provider, epoch)
            except ControllerError as exc:
                log.warning("could not release lease of provider %s: %s", provider, exc)
            else:
                if note is not None:
                    log.info("lease for provider %s released (epoch %s): %s", provider, epoch, note)

    def _answered(self, provider: str, answer: LeaseGrant | LeaseDenied, due: float, sent: float) -> None:
        now = self._clock()
        with self._lock:
            lease = self._leases[provider]
            if isinstance(answer, LeaseDenied):
                if lease.epoch is not None:
                    log.warning("lease for provider %s lost to %s", provider, answer.holder)
                lease.previous = lease.epoch or lease.previous
                lease.epoch = None
                lease.valid_until = -math.inf
                lease.holder = answer.holder
                lease.last_error = f"denied: held by {answer.holder}" if answer.holder else "denied"
                lease.next_due = now + max(answer.retry_after, 0.05)
                return
            if lease.revoked is not None and answer.epoch <= lease.revoked:
                return  # a renewal that crossed the revocation push: the revocation wins
            if lease.epoch is None:
                log.info("lease for provider %s acquired, epoch %s", provider, answer.epoch)
            lease.epoch = answer.epoch
            lease.previous = answer.epoch
            lease.ttl = answer.ttl
            lease.valid_until = sent + answer.ttl - self._margin
            lease.holder = ""
            lease.last_error = ""
            lease.renewal = (due, sent, now)
            lease.own = granted_to(answer.holder, self._instance)
            interval = answer.ttl / 3.0
            lease.next_due = sent + interval * (1.0 - self._jitter * self._rng.random())

    def _failed(self, provider: str, error: str) -> None:
        now = self._clock()
        with self._lock:
            lease = self._leases[provider]
            lease.last_error = error
            # Retry soon, but keep the lease only until its own deadline (gate checks that).
            retry = self._retry if lease.ttl <= 0 else min(self._retry, lease.ttl / 10.0)
            lease.next_due = now + retry
            if lease.epoch is not None and now >= lease.valid_until:
                log.warning("lease for provider %s lapsed: %s", provider, error)

    def start(self) -> None:
        """Start one renewal thread per provider (daemon threads; ``close`` stops them)."""
        for provider in self._leases:
            thread = threading.Thread(target=self._run, args=(provider,), name=f"lease-{provider}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def _run(self, provider: str) -> None:
        wake = self._wake[provider]
        while not self._stop.is_set():
            try:
                delay = self.step_provider(provider)
            except Exception:  # a bug must not silently end renewals: log, back off, go on
                log.exception("lease renewal of provider %s failed unexpectedly", provider)
                delay = self._retry
            wake.wait(min(delay, 3600.0))
            wake.clear()

    def close(self, release: bool = True) -> None:
        """Stop the renewal threads and, on a clean shutdown, release every lease still held."""
        self._stop.set()
        for event in self._wake.values():
            event.set()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads.clear()
        if not release:
            return
        for provider in list(self._leases):
            self._let_go(provider, None)
