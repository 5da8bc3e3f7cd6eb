"""The simulated controller's state behind one lock: terms, sessions, leases, facts, hosts, work.

The rules live beside it, one concern each: ``leases`` (validity, fencing, renewals),
``facts`` (what a fact must carry), ``hosts`` (matching a worker to its record, what a fact, a
join or a restart writes into it, loss and overdue joins) and ``workload`` (work placement and
the demand picture); this module applies them under its lock and makes the durable writes and
pushes that go with them.

One lock guards everything; no method blocks on I/O (frames go to per-connection queues through
``Session.send``), so the core can be driven directly by tests with a :class:`FakeClock`.

Lease rules (docs/protocol.md §5): epochs ``(term, seq)``; a lease is valid until the last
grant/renewal + TTL on the monotonic clock; after a term change a provider is granted only to
its previous holder (the holder on its latest committed fact) until TTL + check interval have
passed; facts and host mutations are accepted only under the provider's current, valid lease.

What survives a restart (docs/protocol.md §7): the facts, which rebuild the expected-host
records; each record's joins and close (the store's host records), so a host that joined before
is known as joined (``disconnected`` until its worker rejoins, ``lost`` if it does not within the
loss timeout) and never looks never-joined; the decommissioned hosts; the term and its start.
Leases, workload and connections do not.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace

from orchestrator.model.facts import GONE_KINDS, FactKind
from orchestrator.protocol.jointoken import TOKEN_EXPIRED, TOKEN_USED
from orchestrator.sim.controller import auth, wire, workload
from orchestrator.sim.controller import hosts as host_rules
from orchestrator.sim.controller import leases as lease_rules
from orchestrator.sim.controller.clock import Clock, to_ms
from orchestrator.sim.controller.facts import invalid_fact, page_size
from orchestrator.sim.controller.reasons import ReasonBoard
from orchestrator.sim.controller.state import (
    DemandV,
    Epoch,
    ErrorV,
    Host,
    Lease,
    LeaseDenyV,
    LeaseGrantV,
    LeaseInfoV,
    RejectV,
    Session,
    TemplateDemandV,
    Work,
)
from orchestrator.sim.controller.store import ControllerStore, FactRecord, JoinBinding

log = logging.getLogger(__name__)


class ControllerCore:
    """All controller state behind one lock."""

    def __init__(
        self,
        store: ControllerStore,
        clock: Clock,
        *,
        ttl: float = 15.0,
        check_interval: float = 1.0,
        heartbeat_interval: float = 5.0,
        controller_id: str = "sim-controller",
        primary: str = "",
        redirect: str = "",
        join_key: bytes = b"",
    ) -> None:
        self.store = store
        # The key worker join tokens are checked with (auth.worker_refusal); none: no worker joins.
        self.join_key = join_key
        self.clock = clock
        self.ttl = ttl
        self.check_interval = check_interval
        self.heartbeat_interval = heartbeat_interval
        self.lost_after = 3 * heartbeat_interval
        self.controller_id = controller_id
        self.primary = primary
        # A standby: every request is answered with notPrimary and this redirect.
        self.redirect = redirect
        self.lock = threading.RLock()
        self.sessions: dict[int, Session] = {}
        self.leases: dict[str, Lease] = {}
        self.hosts: dict[int, Host] = {}
        self.works: list[Work] = []
        # The latest reason per template its provisioners reported (reportReasons), for the status.
        self.reasons = ReasonBoard()
        self.requeued = 0  # works put back to pending by an interruption notice of one of their hosts
        self._next_hid = 1
        self._next_wid = 1
        self.demand_seq = 0
        self._last_demand: tuple[TemplateDemandV, ...] | None = None
        self._demand_time_ms = 0
        self.term = 0
        self.term_start = 0.0
        self.term_started_ms = 0  # wall clock (unix ms), durable with the term: status reports it
        self.seq = 0
        self._load_hosts()
        self.new_term()

    # -- terms -----------------------------------------------------------------------------

    def new_term(self) -> int:
        """Start a new term (at start and on failover): durable term + 1, empty lease table, grace."""
        with self.lock:
            self.term_started_ms = to_ms(self.clock.wall())
            self.term = self.store.bump_term(self.term_started_ms)
            self.term_start = self.clock.monotonic()
            self.seq = 0
            self.leases.clear()
            self.demand_seq = 0
            self._last_demand = None
            log.info("term %d started", self.term)
            return self.term

    def failover(self) -> int:
        """Simulate a failover: a new term, an empty lease table, every connection dropped."""
        with self.lock:
            term = self.new_term()
            for s in list(self.sessions.values()):
                if s.role != "admin":
                    s.close(f"failover to term {term}")
            return term

    def grace_end(self) -> float:
        """Monotonic time at which the post-term-change grace ends.

        The very first term has no predecessor whose leases could still be held: no grace.
        """
        if self.term <= 1:
            return self.term_start
        return self.term_start + self.ttl + self.check_interval

    # -- sessions --------------------------------------------------------------------------

    def add_session(self, session: Session) -> None:
        """Register a new connection."""
        with self.lock:
            session.last_seen = self.clock.monotonic()
            self.sessions[session.sid] = session

    def remove_session(self, session: Session) -> None:
        """Forget a closed connection; a worker's host becomes disconnected (leases stay: §5)."""
        with self.lock:
            self.sessions.pop(session.sid, None)
            if session.role == "worker":
                host = self.hosts.get(session.host_id)
                if host is not None and host.session is session:
                    host.session = None
                    host.disconnected_at = self.clock.monotonic()
                    self.update_demand()

    def sessions_snapshot(self) -> list[Session]:
        """The registered sessions."""
        with self.lock:
            return list(self.sessions.values())

    # -- leases ----------------------------------------------------------------------------

    def _live(self, provider: str, now: float) -> Lease | None:
        return lease_rules.live(self.leases, provider, now)

    def acquire(self, holder: str, provider: str) -> LeaseGrantV | LeaseDenyV:
        """Grant ``provider`` to ``holder`` if free (respecting the grace), renew if already its."""
        with self.lock:
            now = self.clock.monotonic()
            lease = self._live(provider, now)
            if lease is not None:
                return lease_rules.acquire_live(lease, holder, provider, now, self.ttl)
            if now < self.grace_end():
                previous = self.store.last_holder(provider)
                if previous != holder:
                    return LeaseDenyV(provider, "", max(1, to_ms(self.grace_end() - now)), "grace")
            self.seq += 1
            lease = Lease(provider, holder, (self.term, self.seq), now + self.ttl)
            self.leases[provider] = lease
            log.info("lease %s granted to %s epoch %d.%d", provider, holder, *lease.epoch)
            return LeaseGrantV(provider, lease.epoch, to_ms(self.ttl), holder)

    def renew(self, holder: str, provider: str, epoch: Epoch) -> LeaseGrantV | LeaseDenyV:
        """Extend a valid lease held by ``holder`` with ``epoch``."""
        with self.lock:
            now = self.clock.monotonic()
            return lease_rules.renew(self._live(provider, now), holder, provider, epoch, now, self.ttl)

    def release(self, holder: str, provider: str, epoch: Epoch) -> LeaseDenyV | None:
        """Free the lease at once (``None``) if ``holder`` holds it with ``epoch``."""
        with self.lock:
            now = self.clock.monotonic()
            lease = self._live(provider, now)
            if lease is None or lease.revoked:
                return None  # nothing valid to release: releasing is idempotent
            refused = lease_rules.release_refusal(lease, holder, provider, epoch, now)
            if refused is not None:
                return refused
            del self.leases[provider]
            log.info("lease %s released by %s", provider, holder)
            return None

    def revoke(self, provider: str, reason: str) -> bool:
        """Revoke a live lease: push to the holder; nobody else gets it before its TTL ends."""
        with self.lock:
            lease = self._live(provider, self.clock.monotonic())
            if lease is None or lease.revoked:
                return False
            lease.revoked = True
            self._push_to_holder(lease, wire.push_lease_revoked(provider, lease.epoch, reason))
            return True

    def valid_holder(self, provider: str) -> tuple[str, Epoch] | None:
        """Who holds a valid lease of ``provider`` now, by the controller's clock (tests, status)."""
        with self.lock:
            lease = self._live(provider, self.clock.monotonic())
            if lease is None or lease.revoked:
                return None
            return lease.holder, lease.epoch

    def _push_to_holder(self, lease: Lease, frame: bytes) -> None:
        for s in self.sessions.values():
            if s.role == "provisioner" and s.instance_id == lease.holder:
                s.send(frame)

    def _fence(self, holder: str, provider: str, epoch: Epoch) -> RejectV | None:
        return lease_rules.fence(self._live(provider, self.clock.monotonic()), holder, provider, epoch)

    # -- facts -----------------------------------------------------------------------------

    def commit_fact(self, holder: str, fact: FactRecord) -> FactRecord | RejectV:
        """Validate, fence by epoch, commit durably, apply its effect on hosts."""
        problem = invalid_fact(fact)
        if problem:
            return RejectV("invalid", problem)
        with self.lock:
            rejected = self._fence(holder, fact.provider, (fact.term, fact.seq))
            if rejected is not None:
                return rejected
            committed, new = self.store.commit_fact(replace(fact, holder=holder, committed_ms=to_ms(self.clock.wall())))
            if new:
                self._apply_fact(committed)
                self.update_demand()
            return committed

    def commit_facts(self, holder: str, facts: list[FactRecord]) -> list[FactRecord] | RejectV:
        """``commitFacts``: every fact validated and fenced first, then all committed in one
        durable write (or, on the first invalid or stale one, none); effects applied after."""
        for i, fact in enumerate(facts):
            problem = invalid_fact(fact)
            if problem:
                return RejectV("invalid", f"fact {i} ({fact.kind} {fact.instance_key or fact.op_id}): {problem}")
        with self.lock:
            for fact in facts:
                rejected = self._fence(holder, fact.provider, (fact.term, fact.seq))
                if rejected is not None:
                    return rejected
            now_ms = to_ms(self.clock.wall())
            results = self.store.commit_facts([replace(f, holder=holder, committed_ms=now_ms) for f in facts])
            for committed, new in results:
                if new:
                    self._apply_fact(committed)
            if any(new for _, new in results):
                self.update_demand()
            return [committed for committed, _ in results]

    def _find_host(self, instance_id: str, host_name: str, instance_key: str = "") -> Host | None:
        return host_rules.find_host(self.hosts, instance_id, host_name, instance_key)

    def _apply_fact(self, f: FactRecord, *, replay: bool = False) -> None:
        if f.kind == FactKind.EXPECTED_HOST:
            host = self._find_host(f.instance_id, f.host_name, f.instance_key)
            if host is None or host.provider not in ("", f.provider):
                host = Host(hid=self._next_hid)
                self._next_hid += 1
                self.hosts[host.hid] = host
            new_record = host_rules.expect(host, f)
            if new_record and host.ever_joined and not replay:
                # A worker that joined before its record existed (as a static host): the record
                # starts joined, durably, like one the worker joined afterwards.
                self.store.record_join(
                    host.record_fact_id, host.provider, host.instance_id, host.host_name, host.joined_ms
                )
        elif f.kind in GONE_KINDS:
            host = self._find_host(f.instance_id, "", f.instance_key)
            if host is None:
                return
            if f.kind == FactKind.LOST and not replay:
                host.lost = True
                self._host_event("lost", host)
            if host.session is not None:
                host.session.close(f"instance {f.kind}")
                host.session = None
            workload.release_host(self.works, host.hid)
            if host.record_fact_id:
                self.store.forget_record(host.record_fact_id)
            del self.hosts[host.hid]

    def _load_hosts(self) -> None:
        # Expected hosts are facts; rebuild them, then what the store knows of each record.
        for f in self.store.all_facts():
            self._apply_fact(f, replay=True)
        records = self.store.host_records()
        now = self.clock.monotonic()
        for h in self.hosts.values():
            record = records.get(h.record_fact_id)
            if record is not None:
                host_rules.restore(h, record, now)
            if self.store.is_decommissioned(h.host_name, h.instance_id):
                h.decommissioned = True

    def query_facts(self, provider: str, after: int, limit: int) -> tuple[list[FactRecord], bool]:
        """A page of a provider's facts and whether more remain."""
        page = page_size(limit)
        facts = self.store.facts(provider, after, page + 1)
        return facts[:page], len(facts) > page

    # -- hosts -----------------------------------------------------------------------------

    def join_worker(
        self,
        session: Session,
        host_name: str,
        instance_id: str,
        template: str,
        extra: dict[str, str],
        *,
        credential_key: str | None = None,
        token_expires: int | None = None,
    ) -> Host | ErrorV:
        """A worker joins: refuse a decommissioned host, else match it to an expected host.

        ``credential_key`` is the instance key the worker's join token was verified for (``None``
        when the caller authenticated nothing, as the core's own tests do). With it, the host is
        matched by that key first, and a record made for another instance key is refused: the
        self-asserted instance id cannot attach a worker to another host's record. Else matched
        by instance id, then host name; a worker matching nothing becomes a host without a
        provider (a static host). ``extra`` may carry address, instance_key, op_id.

        ``token_expires`` is the expiry (unix seconds) of the verified token: its first join is
        admitted before it and binds the host identity to the instance id it joined with,
        durably; later joins of that identity (the node manager presents its token at every
        reconnect) are admitted from that instance id only, expired or not (:meth:`_token_refusal`).
        """
        with self.lock:
            return self._join_worker(session, host_name, instance_id, template, extra, credential_key, token_expires)

    def _join_worker(
        self,
        session: Session,
        host_name: str,
        instance_id: str,
        template: str,
        extra: dict[str, str],
        credential_key: str | None,
        token_expires: int | None,
    ) -> Host | ErrorV:
        if not host_name:
            return ErrorV("invalid", "joinWorker needs hostName")
        if self.store.is_decommissioned(host_name, instance_id):
            return ErrorV("refused", f"host {host_name!r} ({instance_id or 'no instance id'}) was decommissioned")
        host = host_rules.match_worker(self.hosts, host_name, instance_id, credential_key)
        if host is not None and credential_key is not None:
            refused = host_rules.credential_refusal(host, host_name, credential_key)
            if refused is not None:
                return refused
        if host is not None and host.decommissioned:
            return ErrorV("refused", f"host {host_name!r} was decommissioned")
        # Last of the refusals: an admitted first join is recorded here, durably.
        if credential_key is not None and token_expires is not None:
            refused = self._token_refusal(credential_key, host_name, instance_id, token_expires)
            if refused is not None:
                return refused
        if host is None:
            host = Host(hid=self._next_hid, host_name=host_name, instance_id=instance_id, template=template)
            self._next_hid += 1
            self.hosts[host.hid] = host
        if host.session is not None and host.session is not session:
            host.session.close("replaced by a new join of the same host")
        now_ms = to_ms(self.clock.wall())
        host_rules.attach_worker(host, session, host_name, instance_id, template, extra, credential_key, now_ms)
        if host.record_fact_id:
            # Durable before the joined reply: a restart must not make this host look never-joined.
            self.store.record_join(host.record_fact_id, host.provider, host.instance_id, host.host_name, now_ms)
        session.role = "worker"
        session.host_id = host.hid
        self._host_event("joined", host)
        if not host.busy_work:
            host.idle_since_ms = host.idle_since_ms or now_ms
            # A closed host rejoins closed: it is not offered as idle supply.
            self._host_event("closed" if host.closed else "idleSince", host)
        return host

    def _token_refusal(self, instance_key: str, host_name: str, instance_id: str, expires: int) -> ErrorV | None:
        """Single use and expiry of a verified token; records its first join (call under the lock).

        Single use binds, rather than counts: the node manager sends its token at every
        reconnect (a controller restart, a network cut, a restarted worker whose jobs survive),
        so a second join from the instance that used it is that host coming back, and is
        admitted even past the expiry (the join deadline is about the first join). A join of
        the same identity from any other instance id is a copy of the token: ``tokenUsed``.
        """
        now_ms = to_ms(self.clock.wall())
        bound = self.store.join_binding(instance_key, host_name)
        if bound is not None:
            if bound.instance_id != instance_id:
                return auth.token_refusal(
                    host_name,
                    TOKEN_USED,
                    f"the join token was used by instance {bound.instance_id or '(none)'!r}, "
                    f"not {instance_id or '(none)'!r}",
                )
            if expires * 1000 > bound.expires_ms:
                self.store.bind_join(replace(bound, expires_ms=expires * 1000))
            return None
        if now_ms >= expires * 1000:
            return auth.token_refusal(host_name, TOKEN_EXPIRED, f"the join token expired at unix time {expires}")
        self.store.prune_join_bindings(now_ms, {h.instance_key for h in self.hosts.values() if h.instance_key})
        # Durable before the joined reply: a restarted controller must not admit a copy.
        self.store.bind_join(JoinBinding(instance_key, host_name, instance_id, expires * 1000, now_ms))
        return None

    def _host_for_ref(self, provider: str, instance_id: str, host_name: str) -> Host | None:
        host = self._find_host(instance_id, "" if instance_id else host_name)
        if host is None or host.provider != provider:
            return None
        return host

    def _fenced_host(
        self, holder: str, provider: str, epoch: Epoch, instance_id: str, host_name: str
    ) -> Host | RejectV | ErrorV:
        """The host a holder names, after checking its lease epoch (call with ``self.lock`` held)."""
        rejected = self._fence(holder, provider, epoch)
        if rejected is not None:
            return rejected
        host = self._host_for_ref(provider, instance_id, host_name)
        if host is None:
            return ErrorV("unknownHost", f"no host {instance_id or host_name!r} of provider {provider!r}")
        return host

    def close_host(
        self, holder: str, provider: str, epoch: Epoch, instance_id: str, host_name: str
    ) -> str | RejectV | ErrorV:
        """Close a host: no new work starts on it; work already running finishes.

        Returns ``"closed"`` when the host runs no work (closed at once) or ``"closing"`` when its
        work still runs (it becomes ``closed``, with a ``closed`` host event, when the work ends),
        else a ``RejectV`` (stale epoch) or an ``ErrorV`` (unknown host). Idempotent. The close
        is durable: a restarted controller starts no work on the host either.
        """
        with self.lock:
            host = self._fenced_host(holder, provider, epoch, instance_id, host_name)
            if not isinstance(host, Host):
                return host
            drain = "closing" if host.busy_work else "closed"
            if not host.closed:
                host.closed = True
                if host.record_fact_id:
                    self.store.record_close(host.record_fact_id, host.provider, to_ms(self.clock.wall()))
                self._host_event(drain, host)
                self.update_demand()
            return drain

    def notice_host(
        self, holder: str, provider: str, epoch: Epoch, instance_id: str, host_name: str, reclaim_at_ms: int
    ) -> str | RejectV | ErrorV:
        """The cloud gave the host an interruption notice: close it (no new work), record when it
        is reclaimed, requeue the work it runs (the scheduler's checkpoint-or-requeue: its other
        hosts are freed and the work waits for hosts again), push ``interruptionNotice``.

        Returns the host's state after it (``closed``: the work was requeued), else a
        ``RejectV`` (stale epoch) or an ``ErrorV`` (unknown host). Idempotent: a second notice of
        the host changes nothing (the first reclaim time stays) and pushes no second event.
        """
        with self.lock:
            host = self._fenced_host(holder, provider, epoch, instance_id, host_name)
            if not isinstance(host, Host):
                return host
            if host.reclaim_at_ms:
                return host.state()
            now_ms = to_ms(self.clock.wall())
            host.reclaim_at_ms = reclaim_at_ms
            if not host.closed:
                host.closed = True
                if host.record_fact_id:
                    self.store.record_close(host.record_fact_id, host.provider, now_ms)
            requeued = workload.requeue(self.works, self.hosts, host.hid, now_ms, self._host_event)
            if requeued is not None:
                self.requeued += 1
                log.info("host %s noticed: work %d requeued", host.host_name or host.instance_id, requeued.wid)
            self._host_event("interruptionNotice", host)
            self.run_workload()
            self.update_demand()
            return host.state()

    def decommission_host(
        self,
        holder: str,
        provider: str,
        epoch: Epoch,
        instance_id: str,
        host_name: str,
        reason: str,
        *,
        force: bool = False,
    ) -> str | RejectV | ErrorV:
        """Remove a host for good: stop its worker, refuse its rejoin; ``"decommissioned"`` when done.

        A host running work (busy, or closing) is refused with ``ErrorV(refused)`` unless
        ``force``: nothing removes a host under running work unless the operator says so; the
        way to return it without force is to close it and wait for ``closed``.
        """
        with self.lock:
            host = self._fenced_host(holder, provider, epoch, instance_id, host_name)
            if not isinstance(host, Host):
                return host
            if host.busy_work and not force:
                return ErrorV(
                    "refused",
                    f"host {host.host_name or host.instance_id!r} is running work (work {host.busy_work}): "
                    "close it and wait until it is closed, or decommission with force to stop the work",
                )
            self.store.add_decommissioned(host.host_name, host.instance_id, to_ms(self.clock.wall()))
            host.decommissioned = True
            if host.session is not None:
                host.session.send(wire.push_worker_stop(reason or "decommissioned"))
                host.session.close("decommissioned")
                host.session = None
            workload.release_host(self.works, host.hid)
            host.busy_work = 0
            self._host_event("decommissioned", host)
            self.update_demand()
            return "decommissioned"

    def host_list(self, provider: str = "", template: str = "") -> list[Host]:
        """Hosts filtered by provider and template ("" = any)."""
        with self.lock:
            return [
                replace(h)
                for h in sorted(self.hosts.values(), key=lambda h: h.hid)
                if (not provider or h.provider == provider) and (not template or h.template == template)
            ]

    def _host_event(self, kind: str, host: Host) -> None:
        frame = wire.push_host_event(kind, host, to_ms(self.clock.wall()))
        for s in self.sessions.values():
            if s.role == "provisioner" and (not host.provider or host.provider in s.providers):
                s.send(frame)

    # -- workload and demand ---------------------------------------------------------------

    def submit(self, template: str, hosts: int, duration: float) -> int:
        """Add pending work; returns its id."""
        with self.lock:
            work = Work(self._next_wid, template, hosts, duration)
            self._next_wid += 1
            self.works.append(work)
            self.run_workload()
            self.update_demand()
            return work.wid

    def run_workload(self) -> None:
        """Finish due work (hosts become idle) and start pending work first-in first-out."""
        workload.run(self.works, self.hosts, self.clock.monotonic(), to_ms(self.clock.wall()), self._host_event)

    def demand(self) -> DemandV:
        """The current demand picture (without pushing)."""
        with self.lock:
            templates = self._compute_demand()
            if templates != self._last_demand:
                return DemandV(self.demand_seq + 1, self.term, to_ms(self.clock.wall()), templates)
            return DemandV(self.demand_seq, self.term, self._demand_time_ms, templates)

    def _compute_demand(self) -> tuple[TemplateDemandV, ...]:
        return workload.compute_demand(self.works, self.hosts)

    def update_demand(self, *, force_to: Session | None = None) -> None:
        """Push a new snapshot to provisioners if the picture changed (or to ``force_to`` anyway)."""
        templates = self._compute_demand()
        if templates != self._last_demand:
            self.demand_seq += 1
            self._last_demand = templates
            self._demand_time_ms = to_ms(self.clock.wall())
            frame = wire.demand_message(0, self._current())
            for s in self.sessions.values():
                if s.role == "provisioner":
                    s.send(frame)
        elif force_to is not None:
            force_to.send(wire.demand_message(0, self._current()))

    def _current(self) -> DemandV:
        return DemandV(self.demand_seq, self.term, self._demand_time_ms, self._last_demand or ())

    # -- periodic checks -------------------------------------------------------------------

    def tick(self) -> None:
        """Expire leases, finish and start work, mark lost and overdue hosts, push demand."""
        with self.lock:
            now = self.clock.monotonic()
            for provider, lease in list(self.leases.items()):
                if lease.expires <= now:
                    del self.leases[provider]
                    if not lease.revoked:
                        log.info("lease %s of %s expired", provider, lease.holder)
                        self._push_to_holder(lease, wire.push_lease_revoked(provider, lease.epoch, "expired"))
            for s in list(self.sessions.values()):
                if s.role == "worker" and now - s.last_seen > self.lost_after:
                    s.close("no heartbeat")
            host_rules.mark_absent(self.hosts, now, to_ms(self.clock.wall()), self.lost_after, self._host_event)
            self.run_workload()
            self.update_demand()

    # -- status ----------------------------------------------------------------------------

    def lease_infos(self) -> list[LeaseInfoV]:
        """Leases for status (live ones, and providers still in grace)."""
        with self.lock:
            now = self.clock.monotonic()
            return lease_rules.infos(self.leases, now, max(0, to_ms(self.grace_end() - now)))

    def status_frame(self, rid: int) -> bytes:
        """A ``status`` reply."""
        with self.lock:
            pending = sum(1 for w in self.works if not w.started)
            return wire.reply_status(
                rid,
                controller_id=self.controller_id,
                term=self.term,
                term_started_ms=self.term_started_ms,
                primary=self.primary,
                leases=self.lease_infos(),
                demand=self.demand(),
                hosts=self.host_list(),
                connections=sum(1 for s in self.sessions.values() if s.role != "admin"),
                pending=pending,
                running=len(self.works) - pending,
                reasons=self.reasons.latest(),
            )
