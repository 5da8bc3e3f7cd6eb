"""The controller link: the typed API of one TLS connection to the XCE controller, joined as a
provisioner. The parts, one module each:

- ``transport``: the TLS connection and its I/O thread (``ctl-io``), which reads frames,
  completes the future of every reply and writes what requesters queued. A ``leaseRevoked``
  push is applied right there, at once.
- ``session``: connect (the configured addresses in turn, following ``notPrimary`` redirects),
  join, and the ``ctl-connect`` thread that keeps the link up (rejoin, resync, backoff).
- ``pending``: request/reply futures with the request timeout.
- ``pushes``: the bounded queue to the ``ctl-push`` thread, which calls the demand and
  host-event callbacks, so a slow callback never stops the I/O thread.
- ``messages``: bounded decoding of frames and conversion to the typed values of ``types``.
- ``unknown``: enum values of a newer controller that were skipped: one warning each, counted.
- ``cache``: the newest demand snapshot, the providers' facts and the hosts.

None of the threads ever runs Terraform or Ansible work, so such work cannot delay them.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Final

from orchestrator.clients.controller import messages as m
from orchestrator.clients.controller.cache import LinkCache
from orchestrator.clients.controller.lease import LeaseManager
from orchestrator.clients.controller.pending import NotPrimary, PendingRequests, Reply, Unsupported
from orchestrator.clients.controller.pushes import DEFAULT_MAX_HOST_EVENTS, PushQueue
from orchestrator.clients.controller.session import Session
from orchestrator.clients.controller.transport import Connection, split_address
from orchestrator.clients.controller.types import (
    ControllerStatus,
    DemandSnapshot,
    Epoch,
    Fact,
    FactPage,
    HostEvent,
    HostInfo,
    LeaseDenied,
    LeaseGrant,
    LeaseRevoked,
    LinkState,
)
from orchestrator.clients.controller.unknown import Listener, UnknownValues
from orchestrator.errors import ControllerError, ControllerMisbehaved, FinalError, LeaseLost
from orchestrator.model.backoff import Backoff
from orchestrator.model.config import ControllerSettings
from orchestrator.protocol import framing
from orchestrator.protocol.holder import process_instance
from orchestrator.protocol.schema import MAX_BATCH_FACTS

__all__ = ["ControllerLink", "join_lease_manager", "split_address"]

log = logging.getLogger(__name__)

DemandCallback = Callable[[DemandSnapshot], None]
HostEventCallback = Callable[[HostEvent], None]
RevokeCallback = Callable[[LeaseRevoked], None]
ResyncCallback = Callable[[dict[str, list[Fact]]], None]
ReconnectCallback = Callable[[LinkState], None]

# Pushes a lease-only link (the lease keeper's) drops unconverted: it needs only revocations.
_NOT_FOR_LEASES = frozenset({"demand", "hostEvent"})

# The most pages one read of a provider's facts (``query_facts``, every page) may take
# (docs/protocol.md, "Limits"); the most facts is ``controller.max_facts_per_read`` (default
# 1,000,000). The controller's default page is 1000 facts; 10,000 pages let pages of 100 facts
# reach the default fact cap, and bound the round trips of a controller that pages one by one.
MAX_FACT_PAGES: Final = 10_000


class ControllerLink:
    """The orchestrator's link to the controller (see the module docstring).

    With ``lease_only`` the link serves lease requests only (the lease keeper's link): after a
    join it resyncs nothing, and demand and host-event pushes are dropped after reading their
    type, so a flood of them costs it almost nothing.
    """

    def __init__(
        self,
        settings: ControllerSettings,
        *,
        instance_id: str,
        providers: Sequence[str] = (),
        cluster: str = "",
        version: str = "",
        rng: random.Random | None = None,
        backoff: Backoff | None = None,
        lease_only: bool = False,
        max_host_events: int = DEFAULT_MAX_HOST_EVENTS,
        max_fact_pages: int = MAX_FACT_PAGES,
        lease_instance: str | None = None,
    ) -> None:
        if not settings.addresses:
            raise ControllerError("no controller addresses are configured (controller.addresses)", delay=60.0)
        self.settings = settings
        self.instance_id = instance_id
        self.providers = tuple(providers)
        self.cluster = cluster
        self.version = version or _version()
        self.lease_only = lease_only
        self.max_facts_per_read = settings.max_facts_per_read
        self.max_fact_pages = max_fact_pages
        self.unknown = UnknownValues()
        # The process instance the controller tells this process's leases apart by (one per
        # process and label; the lease keeper is handed its parent's): protocol.holder.
        self.lease_instance = process_instance(instance_id) if lease_instance is None else lease_instance
        rng = rng or random.Random()
        self._pending = PendingRequests()
        join = {
            "instanceId": instance_id,
            "version": self.version,
            "providers": list(self.providers),
            "cluster": cluster,
            "leaseInstance": self.lease_instance,
        }
        self._session = Session(
            settings, join, self._pending, self._frame, backoff or Backoff(initial=0.1, maximum=5.0, rng=rng)
        )
        self._skip = _NOT_FOR_LEASES if lease_only else frozenset()
        self._cache = LinkCache(self.providers)
        self._pushes = PushQueue(max_host_events)
        self._threads: list[threading.Thread] = []
        self._on_demand: list[DemandCallback] = []
        self._on_host_event: list[HostEventCallback] = []
        self._on_revoked: list[RevokeCallback] = []
        self._on_resync: list[ResyncCallback] = []
        self._on_reconnect: list[ReconnectCallback] = []
        # False once the controller answered commitFacts with error(unsupported).
        self._batches = True

    # -- callbacks -----------------------------------------------------------------------------

    def on_demand(self, callback: DemandCallback) -> None:
        """Call ``callback`` with every demand snapshot newer than the last one (push thread)."""
        self._on_demand.append(callback)

    def on_host_event(self, callback: HostEventCallback) -> None:
        """Call ``callback`` with every host event (push thread)."""
        self._on_host_event.append(callback)

    def on_lease_revoked(self, callback: RevokeCallback) -> None:
        """Call ``callback`` on the I/O thread the moment a revocation arrives (must be quick)."""
        self._on_revoked.append(callback)

    def on_resync(self, callback: ResyncCallback) -> None:
        """Call ``callback`` with all facts of the providers after every (re)join (connect thread)."""
        self._on_resync.append(callback)

    def on_reconnect(self, callback: ReconnectCallback) -> None:
        """Call ``callback`` after every successful (re)join and resync (connect thread)."""
        self._on_reconnect.append(callback)

    def on_unknown_value(self, callback: Listener) -> None:
        """Call ``callback(field, n)`` when a message had ``n`` values of ``field`` (``Fact.kind``,
        ``HostInfo.state``, ...) this version does not know, which were skipped (I/O thread)."""
        self.unknown.listen(callback)

    # -- state ---------------------------------------------------------------------------------

    def state(self) -> LinkState:
        """Where the link is connected, the primary and term it learned at join."""
        return self._session.state()

    def demand(self) -> DemandSnapshot | None:
        """The newest demand snapshot seen (by ``(term, seq)``)."""
        return self._cache.demand()

    def facts(self, provider: str) -> list[Fact]:
        """The provider's facts as of the last resync plus the commits made since."""
        return self._cache.facts(provider)

    def hosts(self) -> tuple[HostInfo, ...]:
        """Hosts as of the last resync."""
        return self._cache.hosts()

    def pushes_waiting(self) -> tuple[DemandSnapshot | None, int]:
        """The demand snapshot and the number of host events waiting for the push thread."""
        return self._pushes.waiting()

    def wait_connected(self, timeout: float) -> bool:
        """Wait until joined; False on timeout."""
        return self._session.wait_connected(timeout)

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self, resync: bool = False) -> LinkState:
        """Connect and join once, on this thread (no background reconnects): for one-shot use
        such as ``xceprov status``. Raises ``ControllerError`` naming every address tried."""
        self._start_push_thread()
        self._session.connect()
        if resync:
            self._resync()
        return self.state()

    def start(self) -> None:
        """Connect in the background and keep the link up (reconnect, rejoin, resync) until ``close``."""
        self._start_push_thread()
        thread = threading.Thread(target=self._session.keep_up, args=(self._joined,), name="ctl-connect", daemon=True)
        thread.start()
        self._threads.append(thread)

    def close(self) -> None:
        """Close the connection and stop every thread of the link."""
        self._session.close()
        self._pushes.close()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        self._threads.clear()

    def __enter__(self) -> ControllerLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_push_thread(self) -> None:
        if any(t.name == "ctl-push" for t in self._threads):
            return
        thread = threading.Thread(target=self._push_loop, name="ctl-push", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _joined(self) -> None:
        """After every (re)join on the connect thread: resync, then tell the listeners."""
        if not self.lease_only:
            self._resync()
        state = self.state()
        for cb in self._on_reconnect:
            _safe(cb, state)

    def _resync(self) -> None:
        """After a join: fresh demand snapshot, the providers' facts, hosts."""
        self._deliver_demand(self.request_demand())
        facts = {provider: self.query_facts(provider) for provider in self.providers}
        hosts = self.host_status() if self.providers else []
        self._cache.resynced(facts, hosts)
        for cb in self._on_resync:
            _safe(cb, {p: list(f) for p, f in facts.items()})

    # -- frames and pushes ---------------------------------------------------------------------

    def _frame(self, conn: Connection, body: bytes) -> None:
        """On the I/O thread: decode (bounded), complete a reply's future, or take a push."""
        unknown: list[tuple[str, int]] = []
        frame = m.read_frame(body, skip_pushes=self._skip, unknown=unknown)
        if frame is None:
            return
        request_id, kind, payload = frame
        self.unknown.skipped(kind, conn.address, unknown)
        if request_id:
            if not self._pending.complete(request_id, (kind, payload)):
                log.debug("late reply %d (%s) ignored", request_id, kind)
            return
        if kind == "leaseRevoked":
            revoked = m.lease_revoked(payload or {})
            log.warning("controller revoked the lease of provider %s (%s)", revoked.provider, revoked.reason)
            for cb in self._on_revoked:
                _safe(cb, revoked)
        elif kind == "demand":
            self._pushes.put_demand(m.demand(payload or {}))
        elif kind == "hostEvent":
            event = m.host_event(payload or {})
            if event is None:  # of a kind this version does not know: skipped (and counted above)
                return
            if not self._pushes.put_host_event(event):
                reason = (
                    f"push queue overflow: {self._pushes.max_host_events} host events not yet handled; "
                    "reconnecting to resync"
                )
                log.warning("controller %s: %s", conn.address, reason)
                conn.close(reason)
        else:
            raise framing.WrongMessageType(kind, "a reply or a provisioner push")

    def _push_loop(self) -> None:
        while True:
            item = self._pushes.get()
            if item is None:
                return
            if isinstance(item, DemandSnapshot):
                self._deliver_demand(item)
            else:
                for cb in self._on_host_event:
                    _safe(cb, item)

    def _deliver_demand(self, snapshot: DemandSnapshot) -> None:
        if self._cache.offer_demand(snapshot):
            for cb in self._on_demand:
                _safe(cb, snapshot)

    # -- requests ------------------------------------------------------------------------------

    def request(self, kind: str, body: Any = None, timeout: float | None = None) -> Reply:
        """Send one request and wait for its one reply: ``(reply member, payload dict)``.

        ``ControllerError`` when not connected, on timeout, or when the connection drops
        mid-request; a ``notPrimary`` answer also reconnects to the primary it names."""
        conn, state = self._session.current()
        if conn is None:
            why = f": {state.last_error}" if state.last_error else ""
            raise ControllerError(f"not connected to the controller{why}")
        wait = self.settings.request_timeout if timeout is None else timeout
        try:
            return self._pending.call(conn, kind, body, wait)
        except NotPrimary as exc:
            self._session.redirect(conn, exc.redirect)
            raise

    # -- typed requests ------------------------------------------------------------------------

    def _lease_answer(self, kind: str, payload: Any) -> LeaseGrant | LeaseDenied:
        if kind == "leaseGrant":
            return m.lease_grant(payload or {})
        if kind == "leaseDeny":
            return m.lease_deny(payload or {})
        raise ControllerError(f"unexpected reply to a lease request: {kind}")

    def acquire(self, provider: str, previous: Epoch | None = None) -> LeaseGrant | LeaseDenied:
        """``leaseAcquire`` (``previous`` is informational: the controller knows the previous holder)."""
        kind, payload = self.request("leaseAcquire", {"provider": provider, "epoch": m.epoch_dict(None)})
        return self._lease_answer(kind, payload)

    def renew(self, provider: str, epoch: Epoch) -> LeaseGrant | LeaseDenied:
        """``leaseRenew`` of the lease held under ``epoch``."""
        kind, payload = self.request("leaseRenew", {"provider": provider, "epoch": m.epoch_dict(epoch)})
        return self._lease_answer(kind, payload)

    def release(self, provider: str, epoch: Epoch) -> None:
        """``leaseRelease``: the provider is free at once."""
        kind, payload = self.request("leaseRelease", {"provider": provider, "epoch": m.epoch_dict(epoch)})
        if kind == "leaseDeny":
            log.info("release of provider %s: %s", provider, m.lease_deny(payload or {}).reason)

    def commit_fact(self, fact: Fact) -> int:
        """Commit a fact (idempotent); its ``factId``. ``LeaseLost`` on a stale epoch."""
        kind, payload = self.request("commitFact", m.fact_dict(fact))
        payload = payload or {}
        if kind == "ack":
            fact_id = int(payload.get("factId", 0))
            self._cache.committed(
                replace(
                    fact,
                    fact_id=fact_id,
                    holder=self.instance_id,
                    committed=int(payload.get("committedUnixMs", 0)) / 1000.0,
                )
            )
            return fact_id
        raise self._refused(kind, payload, f"the {fact.kind} fact of provider {fact.provider}", fact.epoch)

    def commit_facts(self, facts: Sequence[Fact]) -> list[int]:
        """Commit up to ``MAX_BATCH_FACTS`` facts in one round trip, all or none (idempotent per
        fact); their ``factId``s in order. ``LeaseLost`` when any epoch is stale (nothing is
        committed then). A controller without ``commitFacts`` (``error(unsupported)``) gets
        one ``commitFact`` per fact, from then on without asking again."""
        if not facts:
            return []
        if len(facts) > MAX_BATCH_FACTS:
            raise FinalError(f"commitFacts of {len(facts)} facts: at most {MAX_BATCH_FACTS} per request")
        if not self._batches:
            return [self.commit_fact(f) for f in facts]
        try:
            kind, payload = self.request("commitFacts", {"facts": [m.fact_dict(f) for f in facts]})
        except Unsupported:
            log.info("controller does not serve commitFacts; committing one fact per request")
            self._batches = False
            return [self.commit_fact(f) for f in facts]
        payload = payload or {}
        if kind != "committed":
            raise self._refused(kind, payload, f"a batch of {len(facts)} facts", facts[0].epoch)
        # Only the controller's fields of each answer are read: the facts are ours, so a kind the
        # answer names differently (or by a value this version does not know) changes nothing.
        answers: list[dict[str, Any]] = payload.get("facts", [])
        if len(answers) != len(facts):
            raise ControllerError(f"controller answered a batch of {len(facts)} facts with {len(answers)}")
        ids = [_fact_id(a) for a in answers]
        for fact, fact_id, answer in zip(facts, ids, answers, strict=True):
            committed = int(answer.get("committedUnixMs", 0) or 0) / 1000.0
            self._cache.committed(replace(fact, fact_id=fact_id, holder=self.instance_id, committed=committed))
        return ids

    def _refused(self, kind: str, payload: dict[str, Any], what: str, epoch: Epoch) -> Exception:
        """The error for a commit the controller did not acknowledge (a notPrimary reconnects)."""
        if kind != "reject":  # error replies were raised by the request already
            return ControllerError(f"unexpected reply to a commit of {what}: {kind}")
        reason = str(payload.get("reason", ""))
        message = str(payload.get("message", ""))
        if reason == "staleEpoch":
            current = m.epoch_of(payload.get("currentEpoch"))
            return LeaseLost(f"controller rejected {what}: stale epoch {epoch} (current {current})")
        if reason == "notPrimary":
            conn, _ = self._session.current()
            if conn is not None:
                self._session.redirect(conn, str(payload.get("redirect", "")))
            return ControllerError(f"controller is not the primary: {message}")
        return FinalError(f"controller rejected {what}: {reason}: {message}")

    def query_facts(self, provider: str, after: int = 0) -> list[Fact]:
        """Every fact of ``provider`` with ``factId > after`` (all pages); see :meth:`read_facts`."""
        return list(self.read_facts(provider, after).facts)

    def read_facts(self, provider: str, after: int = 0) -> FactPage:
        """Every fact of ``provider`` with ``factId > after``, asking page after page.

        Bounded whatever the controller answers: a page that says ``more`` must advance
        ``afterFactId`` (its last fact's id above the one asked from), and one read takes at
        most ``max_fact_pages`` pages and ``max_facts_per_read`` facts; a controller that breaks
        either rule fails the read with ``ControllerMisbehaved`` (retried with backoff by the
        caller). Facts of a kind this version does not know are skipped (``messages.known_kind``).
        """
        out: list[Fact] = []
        first = last_seen = received = 0
        for _ in range(self.max_fact_pages):
            query = {"provider": provider, "afterFactId": after, "limit": 0}
            kind, payload = self.request("queryFacts", query)
            if kind != "factList":
                raise ControllerError(f"unexpected reply to queryFacts: {kind}")
            payload = payload or {}
            raw = payload.get("facts", [])
            received += len(raw)
            if received > self.max_facts_per_read:
                raise ControllerMisbehaved(
                    f"queryFacts of provider {provider}: more than {self.max_facts_per_read} facts in one read "
                    "(controller's paging is unbounded); read failed"
                )
            out.extend(m.fact(f) for f in raw if m.known_kind(f))
            last = _fact_id(raw[-1]) if raw else after
            if raw:
                lowest = min(_fact_id(f) for f in raw)
                first, last_seen = min(first, lowest) if first else lowest, last
            if not payload.get("more"):
                return FactPage(tuple(out), first, last_seen)
            if last <= after:
                raise ControllerMisbehaved(
                    f"queryFacts of provider {provider}: a page after fact {after} said more but did not "
                    f"advance afterFactId (last fact id {last}); read failed"
                )
            after = last
        raise ControllerMisbehaved(
            f"queryFacts of provider {provider}: more than {self.max_fact_pages} pages in one read "
            "(controller's paging is unbounded); read failed"
        )

    def request_demand(self) -> DemandSnapshot:
        """The controller's current demand snapshot."""
        kind, payload = self.request("requestDemand", None)
        if kind != "demand":
            raise ControllerError(f"unexpected reply to requestDemand: {kind}")
        return m.demand(payload or {})

    def host_status(self, provider: str = "", template: str = "") -> list[HostInfo]:
        """Hosts known to the controller (filtered by provider and template when given)."""
        kind, payload = self.request("hostStatus", {"provider": provider, "template": template})
        if kind != "hostList":
            raise ControllerError(f"unexpected reply to hostStatus: {kind}")
        return [m.host_info(h) for h in (payload or {}).get("hosts", [])]

    def query_status(self) -> ControllerStatus:
        """The controller's status view (leases by its clock, demand, hosts)."""
        kind, payload = self.request("queryStatus", None)
        if kind != "status":
            raise ControllerError(f"unexpected reply to queryStatus: {kind}")
        return m.controller_status(payload or {})

    def _host_ref(
        self, kind: str, provider: str, epoch: Epoch, instance_id: str, host_name: str, reason: str, force: bool = False
    ) -> str:
        body = {
            "provider": provider,
            "epoch": m.epoch_dict(epoch),
            "instanceId": instance_id,
            "hostName": host_name,
            "reason": reason,
            "force": force,
        }
        reply, payload = self.request(kind, body)
        if reply == "ack":
            # The host's state after the request (``closed``/``closing``/``decommissioned``);
            # untrusted text from the controller, so only a short known word is passed on.
            state = str((payload or {}).get("hostState", "") or "unknown")
            return state if state.isidentifier() and len(state) <= 32 else "unknown"
        if reply == "reject" and str((payload or {}).get("reason")) == "staleEpoch":
            raise LeaseLost(f"controller rejected {kind} for provider {provider}: stale epoch {epoch}")
        raise FinalError(f"controller refused {kind}: {reply}: {(payload or {}).get('message', '')}")

    def close_host(
        self, provider: str, epoch: Epoch, *, instance_id: str = "", host_name: str = "", reason: str = ""
    ) -> str:
        """Drain a host (fenced by the provider's lease epoch): ``closed`` at once when idle,
        ``closing`` while its work runs (a ``closed`` host event follows when it ends)."""
        return self._host_ref("hostClose", provider, epoch, instance_id, host_name, reason)

    def decommission_host(
        self,
        provider: str,
        epoch: Epoch,
        *,
        instance_id: str = "",
        host_name: str = "",
        reason: str = "",
        force: bool = False,
    ) -> str:
        """Decommission a host: its worker is stopped and a rejoin is refused.

        The controller refuses a busy or closing host unless ``force`` (the operator said so).
        """
        return self._host_ref("hostDecommission", provider, epoch, instance_id, host_name, reason, force)


def _fact_id(d: dict[str, Any]) -> int:
    return int(d.get("factId", 0) or 0)


def _safe(callback: Callable[[Any], None], value: object) -> None:
    try:
        callback(value)
    except Exception:  # a callback's bug must not kill the link's threads
        log.exception("controller link callback %r failed", callback)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("xce-provisioner")
    except Exception:
        return "0"


def join_lease_manager(link: ControllerLink, manager: LeaseManager) -> None:
    """Wire an in-process ``LeaseManager`` to the link: revocations invalidate at once; every
    (re)join re-acquires (docs/protocol.md §8)."""
    link.on_lease_revoked(lambda r: manager.revoke(r.provider, r.epoch))
    link.on_reconnect(lambda _state: manager.kick(reacquire=True))
