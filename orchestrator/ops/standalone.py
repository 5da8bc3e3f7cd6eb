"""The standalone fence with ``terraform.backend: pg``: a lease row per provider, renewed.

The controller lease's rule (``clients/controller/lease.py``), kept by the shared store instead
of a controller (the rows: ``orchestrator/clients/postgres/standalone.py``; the argument:
docs/scale-out.md, "Without a controller"):

- the command takes each provider's row; the database grants it for :data:`STANDALONE_TTL`
  seconds from *its* clock reading, taken after the request was sent;
- a thread renews every TTL/3; a failed renewal (the database restarting, unreachable) is tried
  again every :data:`RETRY` seconds;
- the gate is open until ``renew_sent + TTL − margin`` on this process's monotonic clock, where
  ``renew_sent`` is read just before the last successful take or renewal was sent: it always
  closes before the row's ``expires_at``. When it closes, a running apply sees ``valid()``
  turn false and gives Terraform its graceful interrupt (``ops/executor/tfsteps.py``), and no
  further fact or document is written;
- another command is admitted only once ``expires_at + grace`` has passed by the database's
  clock (:data:`STANDALONE_GRACE`, one TTL): the time the interrupted apply has to finish the
  calls it had in flight, beyond the margin. A renewal that succeeds while the row still names
  this holder (no one was admitted) opens the gate again; one that finds a successor's grant
  closes it for good.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Final, Protocol

from orchestrator.errors import LeaseLost, XceprovError
from orchestrator.model.facts import Epoch

log = logging.getLogger(__name__)

# The standalone lease's TTL: the simulated controller's default lease TTL (model.members).
STANDALONE_TTL: Final = 15.0
# A successor is admitted this long after the holder's lease has run out by the database's clock.
STANDALONE_GRACE: Final = STANDALONE_TTL
# A failed renewal is tried again after this long, until it succeeds or the grant is another's.
RETRY: Final = 1.0
# The epoch of a standalone mutation: no controller granted anything. Tagged ``none``.
STANDALONE_EPOCH: Final = Epoch(0, 0)

Clock = Callable[[], float]


class LeaseRows(Protocol):
    """The lease rows (``orchestrator.clients.postgres.StandaloneLeases``; tests use a fake)."""

    def take(self, provider: str, holder: str, ttl: float, grace: float) -> int:
        """Grant the provider to ``holder`` (the grant's number) or raise ``LeaseHeld``."""
        ...

    def check(self, provider: str, grace: float) -> None:
        """``LeaseHeld`` when ``take`` would be refused now (nothing taken)."""
        ...

    def renew(self, provider: str, holder: str, grant_no: int, ttl: float) -> bool:
        """Extend the grant; False when the row names another grant."""
        ...

    def release(self, provider: str, holder: str, grant_no: int) -> None:
        """Free the row now."""
        ...

    def close(self) -> None:
        """Close the connection."""
        ...


def holder_name() -> str:
    """This command's holder name: its machine, its process and a random token (a pid is reused)."""
    return f"standalone command {os.getpid()}@{socket.gethostname()}#{secrets.token_hex(3)}"


class _Grant:
    """One provider's grant as this process sees it."""

    def __init__(self, grant_no: int, sent: float, ttl: float, margin: float) -> None:
        self.grant_no = grant_no
        self.valid_until = sent + ttl - margin
        self.due = sent + ttl / 3.0  # the next renewal
        self.lost = ""  # why the grant is gone for good ('' while it is not)


class LeasedFence:
    """The standalone fence over :class:`LeaseRows` (module docstring); a context manager."""

    def __init__(
        self,
        rows: LeaseRows,
        providers: Iterable[str],
        *,
        margin: float,
        holder: str | None = None,
        ttl: float = STANDALONE_TTL,
        grace: float = STANDALONE_GRACE,
        clock: Clock = time.monotonic,
    ) -> None:
        # A margin beyond one renewal period would close the gate before the first renewal is due.
        margin = min(max(margin, 0.0), ttl / 3.0)
        self.rows = rows
        self.providers = sorted(providers)
        self.holder = holder or holder_name()
        self.ttl = ttl
        self.grace = grace
        self.margin = margin
        self._clock = clock
        self._lock = threading.Lock()
        self._grants: dict[str, _Grant] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> None:
        """``LeaseHeld`` naming the holder when :meth:`acquire` would be refused now; takes
        nothing (a verb asks before it reads the working directories), then closes."""
        try:
            for provider in self.providers:
                self.rows.check(provider, self.grace)
        finally:
            with contextlib.suppress(XceprovError):
                self.rows.close()

    def acquire(self, start: bool = True) -> LeasedFence:
        """Take every provider's row (``LeaseHeld`` naming the holder: nothing taken), then renew
        on a thread of its own (``start``; tests drive :meth:`step` instead)."""
        try:
            for provider in self.providers:
                sent = self._clock()
                grant_no = self.rows.take(provider, self.holder, self.ttl, self.grace)
                with self._lock:
                    self._grants[provider] = _Grant(grant_no, sent, self.ttl, self.margin)
        except BaseException:
            self.close()
            raise
        if start:
            self._thread = threading.Thread(target=self._run, name="standalone-lease", daemon=True)
            self._thread.start()
        return self

    def step(self) -> float:
        """Renew every grant that is due; the seconds until the next one is."""
        with self._lock:
            due = [(p, g) for p, g in self._grants.items() if not g.lost and g.due <= self._clock()]
        for provider, grant in due:
            self._renew(provider, grant)
        with self._lock:
            waits = [g.due - self._clock() for g in self._grants.values() if not g.lost]
        return max(0.05, min(waits, default=self.ttl / 3.0))

    def _renew(self, provider: str, grant: _Grant) -> None:
        sent = self._clock()
        try:
            ours = self.rows.renew(provider, self.holder, grant.grant_no, self.ttl)
        except XceprovError as exc:  # unreachable or refused: try again soon; the gate closes on time
            with self._lock:
                grant.due = sent + RETRY
            log.warning("provider %s: the standalone lease was not renewed (trying again): %s", provider, exc)
            return
        with self._lock:
            if not ours:
                grant.lost = "another command holds its standalone lease now"
                return
            reopened = grant.valid_until <= sent
            grant.valid_until = sent + self.ttl - self.margin
            grant.due = sent + self.ttl / 3.0
        if reopened:
            log.warning("provider %s: the standalone lease is renewed again, no one else took it", provider)

    def _run(self) -> None:
        wait = self.ttl / 3.0
        while not self._stop.wait(wait):
            try:
                wait = self.step()
            except Exception:  # a bug must not end the renewals silently (the gate closes on time)
                log.exception("standalone lease renewal failed unexpectedly")
                wait = RETRY

    def _why_closed(self, provider: str) -> str | None:
        with self._lock:
            grant = self._grants.get(provider)
            if grant is None:
                return "the standalone lease is not held by this process"
            if grant.lost:
                return grant.lost
            if self._clock() >= grant.valid_until:
                return "the standalone lease could not be renewed in time (the shared store does not answer)"
        return None

    def gate(self, provider: str) -> Epoch:
        """:data:`STANDALONE_EPOCH` while this process's grant of ``provider`` is valid."""
        why = self._why_closed(provider)
        if why is not None:
            raise LeaseLost(f"provider {provider!r}: {why}; no mutation until it is")
        return STANDALONE_EPOCH

    def valid(self, provider: str) -> bool:
        """Whether :meth:`gate` would pass right now (no database call: polled while Terraform runs)."""
        return self._why_closed(provider) is None

    def close(self) -> None:
        """Stop renewing, release every grant still ours (a successor gets it at once), close."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        with self._lock:
            grants = [(p, g) for p, g in self._grants.items() if not g.lost]
            self._grants.clear()
        for provider, grant in grants:
            with contextlib.suppress(XceprovError):  # not released: it runs out by its TTL and grace
                self.rows.release(provider, self.holder, grant.grant_no)
        with contextlib.suppress(XceprovError):
            self.rows.close()

    def __enter__(self) -> LeasedFence:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.close()
