"""The daemon's share of the providers when several daemons share one database.

:class:`ProviderSharing` is the part of :class:`.service.Daemon` that, with a shared store
(``terraform.backend: pg``), starts the heartbeat (:class:`.members.Membership`) and hands the
lease keeper the providers dealt to this daemon: a provider newly dealt to it is asked for at
once, from the heartbeat thread, even while a pass runs (asking is safe at any time: the lease is
the fence, and a pass starts on it only once it is held), so a takeover does not wait for the
pass in flight; a provider dealt away is released between two passes only, when no op of this
daemon is in flight, and the next holder resumes any open op from the controller's facts and the
shared state. Without a store the keeper asks for every
configured provider, as it always did.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from orchestrator.clients.controller.keeper import LeaseKeeper
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.daemon.fence import StoreFence
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.members import Membership
from orchestrator.errors import XceprovError
from orchestrator.model.config import Config
from orchestrator.model.members import DEFAULT_LEASE_TTL, MemberStore
from orchestrator.ops.fence import Fence

log = logging.getLogger("orchestrator.daemon.service")


class ProviderSharing:
    """The daemon's membership and share; :class:`.service.Daemon` sets the parts it reads."""

    lifecycle: Lifecycle
    config: Config
    instance_id: str
    providers: list[str]
    link: ControllerLink | None
    keeper: LeaseKeeper | None
    membership: Membership | None
    _share_applied: tuple[set[str], int] | None
    # apply_share (the loop) and ask_added (the heartbeat thread) each hand the keeper a whole set.
    _share_lock: threading.Lock

    def join_members(self, store: MemberStore, lease_instance: str, wake: Callable[[str], None]) -> None:
        """Heartbeat in ``store`` as the lease holder ``lease_instance`` (the keeper asks for nothing
        until the first members read has dealt this daemon its share); ``wake`` starts a pass when
        the share or the store's reachability changes."""
        self.membership = Membership(
            store,
            instance=lease_instance,
            label=self.instance_id,
            configured=self.providers,
            held=self._held_epochs,
            ttl=self._lease_ttl,
            interval=self._heartbeat_interval,
            on_change=lambda: self._share_changed(wake),
        )
        # Registered before the lease release, so run after it (on_stop runs last registered
        # first): the others see this daemon gone once its leases are free to take.
        self.lifecycle.on_stop("shared store membership", self._leave)

    def _share_changed(self, wake: Callable[[str], None]) -> None:
        """On the heartbeat thread: ask for a newly dealt provider now, then wake the loop."""
        try:
            self.ask_added()
        finally:
            wake("store")

    def _leave(self) -> None:
        if self.membership is not None:
            self.membership.stop(leave=True)

    def fenced(self, leases: Fence) -> Fence:
        """The keeper's gate, closed while the shared store does not answer (with one)."""
        return leases if self.membership is None else StoreFence(leases, self.membership.closed_reason)

    def _lease_ttl(self) -> float:
        ttl = self.link.state().lease_ttl if self.link is not None else 0.0
        if ttl <= 0 and self.keeper is not None:
            ttl = max((s.ttl for s in self.keeper.status()), default=0.0)
        return ttl if ttl > 0 else DEFAULT_LEASE_TTL

    def _heartbeat_interval(self) -> float:
        return min(self._lease_ttl() / 3.0, self.config.daemon.reconcile_interval)

    def _held_epochs(self) -> dict[str, str]:
        if self.keeper is None:
            return {}
        try:
            statuses = self.keeper.status()
        except (ValueError, XceprovError):  # the keeper closed under the heartbeat (a stop): none held
            return {}
        return {s.provider: s.epoch.tag() for s in statuses if s.held and s.epoch is not None}

    def wait_for_share(self, deadline: float) -> None:
        """Until a second members read, one heartbeat interval after the first, has dealt this
        daemon its share (at most ``deadline``, monotonic), then hand it to the keeper: daemons
        started together see each other's rows by then, so the first one up does not take every
        provider only to release most of them after its first pass."""
        if self.membership is None:
            return
        while self.membership.reads() < 2 and time.monotonic() < deadline and not self.lifecycle.stopping:
            self.lifecycle.wait_stopping(0.1)
        self.apply_share()

    def ask_added(self) -> None:
        """At any time (the heartbeat thread calls it as the share changes): the keeper asks at
        once for the providers newly dealt to this daemon, and keeps the ones dealt away for
        :meth:`apply_share` to release between passes. Nothing before the first share is applied
        (``wait_for_share``: the first daemon up must not take every provider)."""
        if self.membership is None or self.keeper is None:
            return
        with self._share_lock:
            if self._share_applied is None:
                return
            share = self.membership.dealt()
            wanted = self.keeper.wanted()
            if share is None or share <= wanted:
                return
            log.info("providers newly dealt to this daemon, asked for now: %s", ", ".join(sorted(share - wanted)))
            self.keeper.want(sorted(wanted | share))

    def apply_share(self) -> None:
        """Between two passes: the keeper asks for the providers dealt to this daemon now, and
        again at once for a dealt one another member no longer holds (a release)."""
        if self.membership is None or self.keeper is None:
            return
        with self._share_lock:
            self._apply_share()

    def _apply_share(self) -> None:
        assert self.membership is not None and self.keeper is not None
        share = self.membership.dealt()
        if share is None:
            return
        version = self.membership.version()
        if self._share_applied == (share, version):
            return
        previous = self._share_applied[0] if self._share_applied is not None else self.keeper.wanted()
        if share != previous:
            log.info(
                "providers dealt to this daemon: %s (was %s)",
                ", ".join(sorted(share)) or "none",
                ", ".join(sorted(previous)) or "none",
            )
        self.keeper.want(sorted(share))
        self._share_applied = (share, version)

    def wanted_providers(self) -> list[str]:
        """The providers this daemon asks leases for."""
        return sorted(self.keeper.wanted()) if self.keeper is not None else list(self.providers)
