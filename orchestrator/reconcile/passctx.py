"""The inputs of one reconcile pass, read once, refreshed only where the pass itself changed them.

:func:`read_inputs` is the read phase: the controller must be connected and have sent a demand
snapshot; then the hosts and the facts of *every* configured provider are read. Facts of a
provider whose lease is not valid are read too: they are never changed by this pass, but their
keys count toward the gap and the budget (a create in flight on a provider whose lease lapsed
is still coming; asking for its hosts elsewhere would duplicate them). Any failure raises, and
the loop then runs no later phase.

A phase that changed a provider (an op, a return) marks its facts stale; the next read of them
asks the controller again, so later phases see the hosts the pass created or returned.

A provider whose lease comes during the pass is resumed on a thread of its own
(:mod:`.beside`) with a context of its own (:meth:`PassContext.beside`): a context is changed by
one thread only, and the lock guards its caches while another thread copies them.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from orchestrator.clients.controller.types import DemandSnapshot, Fact, HostInfo
from orchestrator.errors import XceprovError
from orchestrator.model.config import Config
from orchestrator.model.facts import GONE_KINDS, FactKind
from orchestrator.ops.fence import Fence
from orchestrator.reconcile.gap import TemplateGap
from orchestrator.reconcile.ledger import InstanceRecord, ledger
from orchestrator.reconcile.noticebook import NoticeBook, leaving_keys
from orchestrator.reconcile.offers import default_names
from orchestrator.reconcile.reclaim import ReclaimCandidate
from orchestrator.reconcile.results import ReadResult
from orchestrator.reconcile.scaleout import ScaleOutDecision
from orchestrator.reconcile.view import Clock, ControllerView
from orchestrator.workspace.sharedstore import cluster_documents


class ReadFailed(XceprovError):
    """The pass could not read one of its inputs: it changes nothing."""


@dataclass
class PassContext:
    """What a pass read, and what it did so far (ops, gaps, decisions, reclaim candidates)."""

    view: ControllerView
    snapshot: DemandSnapshot
    hosts: list[HostInfo]
    leased: list[str]
    read_at: float
    _facts: dict[str, list[Fact]]
    _stale: set[str] = field(default_factory=set)
    gaps: dict[str, TemplateGap] = field(default_factory=dict)
    ops: list[str] = field(default_factory=list)
    decisions: list[ScaleOutDecision] = field(default_factory=list)
    candidates: list[ReclaimCandidate] = field(default_factory=list)
    # (provider, template) → its default offering's name: the offering of a key whose intent names none.
    defaults: Mapping[tuple[str, str], str] = field(default_factory=dict)
    # Instance key -> the controller's time of its interruption notice (noticebook.py): leaving.
    noticed: dict[str, float] = field(default_factory=dict)
    # Held while the caches change and while :meth:`beside` copies them (never over a read of the
    # controller: the copy is what a takeover's resume waits for).
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # The ledger of the facts as read, and the notices it was made with: the phases ask for it
    # several times a pass; made again once a provider's facts are (to be) read again.
    _records: list[InstanceRecord] | None = field(default=None, repr=False, compare=False)
    _records_noticed: dict[str, float] | None = field(default=None, repr=False, compare=False)

    def facts(self, provider: str) -> list[Fact]:
        """The provider's facts; asked again when this pass changed the provider."""
        if provider in self._stale:
            fresh = list(self.view.facts(provider))
            with self._lock:
                self._facts[provider] = fresh
                self._stale.discard(provider)
                self._records = None
        return list(self._facts.get(provider, []))

    def all_facts(self) -> list[Fact]:
        """Facts of every configured provider."""
        return [f for p in sorted(self._facts) for f in self.facts(p)]

    def records(self) -> list[InstanceRecord]:
        """The ledger over every provider's facts (gap, budget, lifetime and reclaim read it)."""
        with self._lock:
            fresh = not self._stale and self._records_noticed is self.noticed
            cached = self._records if fresh else None
        if cached is not None:
            return list(cached)
        records = ledger(self.all_facts(), self.defaults).values()
        made = [replace(r, noticed=self.noticed[r.key]) if r.key in self.noticed else r for r in records]
        with self._lock:
            if not self._stale:  # no provider went stale while it was made
                self._records, self._records_noticed = made, self.noticed
        return list(made)

    def stale(self, provider: str) -> None:
        """This pass changed ``provider``: read its facts again before using them."""
        with self._lock:
            self._stale.add(provider)
            self._records = None

    def lost(self, provider: str) -> None:
        """The provider's lease went during the pass: no later phase changes it."""
        if provider in self.leased:
            self.leased.remove(provider)

    def joined(self, provider: str) -> None:
        """``provider``'s lease came during the pass and its resume ended: later phases act on it,
        on its facts read again (its previous holder and its resume wrote since the read)."""
        self.stale(provider)
        if provider not in self.leased:
            self.leased.append(provider)

    def beside(self, provider: str) -> PassContext:
        """A context of its own for the resume of ``provider`` on another thread, while this
        pass goes on: the same read, a copy of the facts as this pass has them now, ``provider``
        its only leased one and its facts read again at their first use."""
        with self._lock:
            facts, stale = dict(self._facts), {*self._stale, provider}
        beside = PassContext(
            self.view, self.snapshot, list(self.hosts), [provider], self.read_at, facts, stale, defaults=self.defaults
        )
        beside.noticed = dict(self.noticed)
        return beside

    def expected(self, provider: str) -> list[Fact]:
        """The ``expectedHost`` facts of the provider's hosts that are not gone, by key."""
        facts = self.facts(provider)
        gone = {f.instance_key for f in facts if f.kind in GONE_KINDS}
        latest: dict[str, Fact] = {}
        for fact in facts:
            if fact.kind == FactKind.EXPECTED_HOST and fact.instance_key and fact.instance_key not in gone:
                latest[fact.instance_key] = fact
        return [latest[k] for k in sorted(latest)]

    def read_result(self) -> ReadResult:
        """What the read saw: the snapshot's order and time, counts, leases."""
        facts = {p: len(f) for p, f in sorted(self._facts.items())}
        snapshot = self.snapshot
        return ReadResult(snapshot.term, snapshot.seq, snapshot.time, len(self.hosts), facts, list(self.leased))


def read_inputs(config: Config, fence: Fence, view: ControllerView, clock: Clock) -> PassContext:
    """The read phase (see the module docstring); ``ReadFailed`` names what could not be read."""
    if not view.connected():
        raise ReadFailed("controller not connected")
    snapshot = view.demand()
    if snapshot is None:
        raise ReadFailed("no demand snapshot from the controller yet")
    hosts: Sequence[HostInfo] = view.hosts()
    facts = {p: list(view.facts(p)) for p in sorted(config.providers)}
    leased = [p for p in sorted(config.providers) if fence.valid(p)]
    ctx = PassContext(view, snapshot, list(hosts), leased, clock(), facts, defaults=default_names(config))
    ctx.noticed = leaving_keys(NoticeBook(cluster_documents(config)).entries().values(), ctx.read_at)
    return ctx
