"""The controller of a replay: the controller as the real pass and executor see it, on the virtual clock.

:class:`ModelController` is at once the pass's :class:`~orchestrator.reconcile.view.ControllerView`
(demand, hosts, facts, connected), the executor's :class:`~orchestrator.ops.facts.FactLog` and its
:class:`~orchestrator.ops.hosts.HostControl`; :class:`ReplayFence` is a lease that never goes.
The workload is the simulated controller's own (``orchestrator.sim.controller.workload`` over its
``Host`` and ``Work``: first in first out per template on idle hosts, a closed host drained, a
requeue on a loss), so demand is exactly what ``compute_demand`` says, as the daemon reads it from
a simulated controller. Rules kept as the simulated controller has them (``sim/controller/core.py``):

* facts are idempotent per ``(kind, op, key)``, numbered in order, stamped with the clock
  (every commit takes a millisecond: a fact is never committed at the very time of a snapshot
  taken before it, see ``reconcile/gap.py``'s ``unreflected``);
* an ``expectedHost`` fact makes an expected host; it joins at its instance's launch in the
  :class:`~orchestrator.replay.cloud.ModelCloud` (a warm-pool instance started by the op: at
  the fact) plus a drawn join latency, if the instance is still live then; past its join
  deadline unjoined it is ``overdue``;
* ``hostClose`` answers ``closed`` or ``closing`` (busy); ``hostDecommission`` of a busy or
  closing host is refused unless forced; a ``returned``/``lost`` fact removes the host (a lost
  one with its ``lost`` host event) and takes it out of its work;
* one liberty, for speed: the facts of a create op all of whose instances are gone (returned or
  lost) for ``keep_gone`` (an hour) leave what the pass reads (``facts``; the figures read them
  all, ``all_facts``). The pass reads every fact each time (the ledger, open ops), so a week of
  facts would make each pass slower than the whole week's passes may take; and such an op counts
  nowhere any more: gone instances are neither supply, nor in flight, nor budget, nor reclaim
  candidates, its op is closed, and a refusal's quota hold was cleared by the first pass after
  the instance went (``refusedops.quota_freed``). ``keep_gone=None`` keeps every fact;
* a loss (:meth:`ModelController.lose`) ends one live instance in the cloud: its host is
  disconnected, its work requeued (the scheduler's requeue of a killed job), and it is ``lost``
  at the controller after ``lost_after`` (three missed heartbeats).

Time: timers (job submits, joins, work ends, losses, whatever the runner adds) run in time
order, each at its own time; every call from the pass first catches the model up with the clock
(which the model engine moves during applies), so what the pass reads is the world as of now.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import random
from collections.abc import Callable, Sequence
from typing import Final

from orchestrator.clients.controller.types import DemandSnapshot, Fact, HostEvent, HostInfo
from orchestrator.errors import FinalError
from orchestrator.model.facts import GONE_KINDS, Epoch, FactKind
from orchestrator.replay.clock import VirtualClock
from orchestrator.replay.cloud import ModelCloud, ModelInstance
from orchestrator.replay.factbook import FactBook
from orchestrator.replay.hostcontrol import REPLAY_EPOCH, WORKER, host_info, ms, template_demand
from orchestrator.replay.model import Job, Latencies, Loss
from orchestrator.sim.controller import workload
from orchestrator.sim.controller.state import Host, TemplateDemandV, Work

TERM: Final = 1
# The simulated controller's loss timeout: three missed heartbeats of 5 s.
LOST_AFTER: Final = 15.0
# How long a commit takes on the virtual clock (a round trip; see the module docstring).
COMMIT_TIME: Final = 0.001
# How long after its last instance went an op's facts stay in what the pass reads (``keep_gone``).
KEEP_GONE: Final = 3600.0

Action = Callable[[float], None]

__all__ = ["REPLAY_EPOCH", "ModelController"]


class ModelController:
    """The controller of a replay (module docstring).

    ``on_demand``, ``on_host_event`` and ``on_facts`` are told of every demand push, host event
    and newly committed fact (the daemon's flight recorder takes them); ``pushes`` counts the
    pushes and host events, what wakes the daemon (the runner's wake rule). ``pending_seconds``
    is the integral of each template's pending hosts (``compute_demand``'s ``pending_hosts``)
    over ``window``, in host-seconds.
    """

    def __init__(
        self,
        clock: VirtualClock,
        cloud: ModelCloud,
        latencies: Latencies,
        rng: random.Random,
        *,
        window: tuple[float, float] | None = None,
        lost_after: float = LOST_AFTER,
        keep_gone: float | None = KEEP_GONE,
    ) -> None:
        self.clock = clock
        self.cloud = cloud
        self.latencies = latencies
        self.rng = rng
        self.lost_after = lost_after
        self.keep_gone = keep_gone
        self.window = window if window is not None else (clock.now, float("inf"))
        self.hosts_by_id: dict[int, Host] = {}
        self.works: list[Work] = []
        self.on_demand: Callable[[DemandSnapshot], None] | None = None
        self.on_host_event: Callable[[HostEvent], None] | None = None
        self.on_facts: Callable[[Sequence[Fact]], None] | None = None
        self.pushes = 0
        self.pending_seconds: dict[str, float] = {}
        self.now = clock.now  # the model's time: every timer up to here has run
        self.book = FactBook()
        self._intents: dict[str, float] = {}  # op → when its intent was committed
        self._timers: list[tuple[float, int, Action]] = []
        self._order = itertools.count()
        self._next_hid = 1
        self._next_wid = 1
        self._ends: set[tuple[int, float]] = set()  # (work, its start) whose end is a timer
        self._picture: tuple[TemplateDemandV, ...] = ()
        self._snapshot = DemandSnapshot(0, TERM, clock.now, ())
        self._busy = False  # running timers: the calls they make do not catch up again

    # -- time ------------------------------------------------------------------------------------

    def at(self, when: float, action: Action) -> None:
        """Run ``action(when)`` at ``when`` (a time passed: at the next catch-up, in order)."""
        heapq.heappush(self._timers, (when, next(self._order), action))

    def next_due(self) -> float | None:
        """When the next timer runs (None: none left)."""
        return self._timers[0][0] if self._timers else None

    def catch_up(self, until: float | None = None) -> None:
        """Run every timer up to ``until`` (default: the clock) in time order, each at its time."""
        until = self.clock.now if until is None else until
        if self._busy:
            return
        self._busy = True
        try:
            while self._timers and self._timers[0][0] <= until:
                when, _, action = heapq.heappop(self._timers)
                self._account(max(when, self.now))
                action(self.now)
            self._account(max(until, self.now))
        finally:
            self._busy = False

    def step(self, until: float) -> float | None:
        """Run the timers due at the first timer's time if that is at most ``until``; that time
        (None: none due by then). The runner steps between passes to see each push when it comes."""
        if not self._timers or self._timers[0][0] > until:
            return None
        first = self._timers[0][0]
        self.catch_up(first)
        return first

    def _account(self, t: float) -> None:
        """Integrate the pending hosts from the model's time to ``t`` (within the window)."""
        start, end = max(self.now, self.window[0]), min(t, self.window[1])
        if end > start:
            for d in self._picture:
                if d.pending_hosts:
                    self.pending_seconds[d.template] = self.pending_seconds.get(d.template, 0.0) + d.pending_hosts * (
                        end - start
                    )
        self.now = max(self.now, t)

    def _sync(self) -> None:
        self.catch_up(self.clock.now)

    # -- the model's events ----------------------------------------------------------------------

    def submit(self, job: Job, now: float) -> None:
        """The job arrives: pending work of its template (the simulated controller's ``submit``)."""
        self.works.append(Work(self._next_wid, job.template, job.hosts, job.duration))
        self._next_wid += 1
        self._changed(now)

    def pick(self, loss: Loss) -> ModelInstance | None:
        """The instance a loss takes: of its provider and template, the oldest live one whose
        host runs work, else the oldest; None when there is none."""
        live = [i for i in self.cloud.live(loss.provider) if i.template == loss.template]
        busy = [i for i in live if (h := self._host_of_key(i.key)) is not None and h.busy_work]
        return (busy or live)[0] if live else None

    def notice(self, inst: ModelInstance, reclaim_at: float, now: float) -> Host | None:
        """The cloud's interruption notice of ``inst`` acted on at the controller, as the
        simulated controller's ``notice_host`` does: its host closed (no new work), its reclaim
        time kept, its work requeued, ``interruptionNotice`` pushed; the host (None: no host)."""
        host = self._host_of_key(inst.key)
        if host is None or host.reclaim_at_ms:
            return host
        host.reclaim_at_ms = ms(reclaim_at)
        host.closed = True
        workload.requeue(self.works, self.hosts_by_id, host.hid, ms(now), self._event_at(now))
        self._event("interruptionNotice", host, now)
        self._changed(now)
        return host

    def lose(self, loss: Loss, now: float, key: str = "") -> ModelInstance | None:
        """The cloud takes the live instance ``key`` (given by a notice before), else
        :meth:`pick`'s: ended in the cloud with the loss's reason, its host disconnected and its
        work requeued; None when there was none to take."""
        chosen = self.cloud.instances.get(key) if key else None
        inst = chosen if chosen is not None and chosen.live else self.pick(loss)
        if inst is None:
            return None
        self.cloud.end(inst.key, now, loss.reason)
        host = self._host_of_key(inst.key)
        if host is not None:
            workload.requeue(self.works, self.hosts_by_id, host.hid, ms(now), self._event_at(now))
            if host.session is not None:
                host.session = None
                host.disconnected_at = now
                self.at(now + self.lost_after, functools.partial(self._absent, host))
        self._changed(now)
        return inst

    def _absent(self, host: Host, now: float) -> None:
        """A disconnected host that did not come back is lost at the controller (``mark_absent``)."""
        gone = host.session is None and not host.lost and not host.decommissioned
        if self.hosts_by_id.get(host.hid) is host and gone:
            host.lost = True
            self._event("lost", host, now)
            self._changed(now)

    def _join(self, host: Host, now: float) -> None:
        """The host's worker joins, if its record and its instance are still there."""
        if self.hosts_by_id.get(host.hid) is not host or host.decommissioned or host.lost or host.session:
            return
        inst = self.cloud.instances.get(host.instance_key)
        if inst is None or not inst.live:
            return
        now_ms = ms(now)
        host.session = WORKER
        host.ever_joined, host.joined_ms, host.overdue, host.disconnected_at = True, now_ms, False, 0.0
        self._event("joined", host, now)
        if not host.busy_work:
            host.idle_since_ms = host.idle_since_ms or now_ms
            self._event("closed" if host.closed else "idleSince", host, now)
        self._changed(now)

    def _overdue(self, host: Host, now: float) -> None:
        if self.hosts_by_id.get(host.hid) is host and not host.ever_joined and not host.overdue:
            host.overdue = True
            self._event("joinOverdue", host, now)
            self._changed(now)

    def _work_ends(self, now: float) -> None:
        self._changed(now)

    # -- workload and demand ---------------------------------------------------------------------

    def _changed(self, now: float) -> None:
        """Run the workload (finish due work, start pending work), then push demand if it changed."""
        workload.run(self.works, self.hosts_by_id, now, ms(now), self._event_at(now))
        for work in self.works:
            if work.started and (work.wid, work.started) not in self._ends:
                self._ends.add((work.wid, work.started))
                self.at(work.started + work.duration, self._work_ends)
        picture = workload.compute_demand(self.works, self.hosts_by_id)
        if picture != self._picture:
            self._picture = picture
            self._snapshot = DemandSnapshot(
                self._snapshot.seq + 1, TERM, now, tuple(template_demand(t) for t in picture)
            )
            self.pushes += 1
            if self.on_demand is not None:
                self.on_demand(self._snapshot)

    def picture_seq(self) -> int:
        """The newest snapshot's number (it grows with every push)."""
        return self._snapshot.seq

    def picture(self) -> tuple[TemplateDemandV, ...]:
        """The demand as ``compute_demand`` gives it now (the model's time)."""
        return self._picture

    def _event_at(self, now: float) -> Callable[[str, Host], None]:
        return lambda kind, host: self._event(kind, host, now)

    def _event(self, kind: str, host: Host, now: float) -> None:
        self.pushes += 1
        if self.on_host_event is not None:
            self.on_host_event(HostEvent(kind, host_info(host), now))

    def _host_of_key(self, key: str) -> Host | None:
        return next((h for h in self.hosts_by_id.values() if h.instance_key == key), None)

    def _find(self, instance_id: str, host_name: str, instance_key: str = "") -> Host | None:
        """The host by instance id, else key, else name (``sim/controller/hosts.find_host``; a
        decommissioned one too: its ``returned`` fact removes it)."""
        hosts = self.hosts_by_id.values()
        for ref, field in ((instance_id, "instance_id"), (instance_key, "instance_key"), (host_name, "host_name")):
            if ref:
                found = [h for h in hosts if getattr(h, field) == ref]
                if found:
                    return min(found, key=lambda h: h.decommissioned)
        return None

    # -- ControllerView --------------------------------------------------------------------------

    def demand(self) -> DemandSnapshot | None:
        """The newest snapshot (a controller always has one: seq 0, empty, before any work)."""
        self._sync()
        return self._snapshot

    def hosts(self) -> Sequence[HostInfo]:
        """Every host the controller knows now (as ``hostStatus`` of every provider)."""
        self._sync()
        return [host_info(h) for h in self.hosts_by_id.values()]

    def facts(self, provider: str) -> list[Fact]:
        """Every fact of ``provider``, oldest first."""
        return self.book.facts(provider)

    def connected(self) -> bool:
        return True

    def all_facts(self) -> dict[str, list[Fact]]:
        """Provider → its facts (the runner's ledger)."""
        return self.book.all_facts()

    # -- FactLog ---------------------------------------------------------------------------------

    def commit(self, fact: Fact) -> None:
        self.commit_many([fact])

    def commit_many(self, facts: Sequence[Fact]) -> None:
        """Commit the facts not yet known (per kind, op and key), numbered and stamped now."""
        self._sync()
        now = self.clock.advance(COMMIT_TIME)
        self._sync()
        new: list[Fact] = []
        for fact in facts:
            stored = self.book.add(fact, now)
            if stored is None:
                continue
            new.append(stored)
            if self.keep_gone is not None:
                for op_id in self.book.all_gone(stored):
                    self.at(now + self.keep_gone, functools.partial(self._forget, stored.provider, op_id))
            self._apply(stored, now)
        if new:
            self._changed(now)
            if self.on_facts is not None:
                self.on_facts(new)

    def _forget(self, provider: str, op_id: str, _now: float) -> None:
        self.book.forget(provider, op_id)

    def _apply(self, fact: Fact, now: float) -> None:
        """A new fact's effect on the hosts (``ControllerCore._apply_fact``)."""
        if fact.kind == FactKind.REQUEST_INTENT:
            self._intents[fact.op_id] = now
        elif fact.kind == FactKind.EXPECTED_HOST:
            host = self._find(fact.instance_id, fact.host_name, fact.instance_key)
            if host is None or host.decommissioned or host.provider not in ("", fact.provider):
                host = Host(hid=self._next_hid, record_fact_id=fact.fact_id)
                self._next_hid += 1
                self.hosts_by_id[host.hid] = host
            host.instance_id = fact.instance_id or host.instance_id
            host.host_name = fact.host_name or host.host_name
            host.instance_key = fact.instance_key or host.instance_key
            host.op_id, host.provider, host.template = fact.op_id, fact.provider, fact.template
            host.address = fact.address or host.address
            host.join_deadline_ms, host.overdue = ms(fact.join_deadline), False
            if not host.ever_joined:
                inst = self.cloud.instances.get(host.instance_key)
                # Made by this op: it boots from its launch; started from a warm pool: from now.
                made = inst is not None and inst.launched >= self._intents.get(fact.op_id, now)
                base = inst.launched if inst is not None and made else now
                self.at(max(now, base + self.latencies.draw_join(self.rng)), functools.partial(self._join, host))
                if fact.join_deadline:
                    self.at(fact.join_deadline + COMMIT_TIME, functools.partial(self._overdue, host))
        elif fact.kind in GONE_KINDS:
            host = self._find(fact.instance_id, "", fact.instance_key)
            if host is None:
                return
            if fact.kind == FactKind.LOST and not host.decommissioned:
                host.lost = True
                self._event("lost", host, now)
            host.session = None
            workload.release_host(self.works, host.hid)
            del self.hosts_by_id[host.hid]

    # -- HostControl -----------------------------------------------------------------------------

    def _host_ref(self, kind: str, provider: str, host: HostInfo) -> Host:
        self._sync()
        found = self._find(host.instance_id, "" if host.instance_id else host.host_name)
        if found is None or found.provider != provider or found.decommissioned:
            name = host.instance_id or host.host_name
            raise FinalError(f"controller refused {kind}: error: no host {name!r} of provider {provider!r}")
        return found

    def hosts_of(self, provider: str) -> list[HostInfo]:
        """Hosts of ``provider`` (``HostControl.hosts``; named apart from the view's ``hosts``)."""
        return [h for h in self.hosts() if h.provider == provider]

    def close(self, provider: str, epoch: Epoch, host: HostInfo, reason: str) -> str:
        """``hostClose``: ``closing`` while its work runs, else ``closed``."""
        found = self._host_ref("hostClose", provider, host)
        drain = "closing" if found.busy_work else "closed"
        if not found.closed:
            found.closed = True
            self._event(drain, found, self.now)
            self._changed(self.now)
        return drain

    def decommission(self, provider: str, epoch: Epoch, host: HostInfo, reason: str, force: bool = False) -> None:
        """``hostDecommission``: refused for a host that runs work unless forced."""
        found = self._host_ref("hostDecommission", provider, host)
        if found.busy_work and not force:
            raise FinalError(
                f"controller refused hostDecommission: refused: host {found.host_name or found.instance_id!r} "
                f"is running work (work {found.busy_work}): close it and wait until it is closed, "
                "or decommission with force to stop the work"
            )
        found.decommissioned = True
        found.session = None
        workload.release_host(self.works, found.hid)
        found.busy_work = 0
        self._event("decommissioned", found, self.now)
        self._changed(self.now)
