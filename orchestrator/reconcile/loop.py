"""The reconcile pass: read → resume → scale out → bootstrap → join tracking → reclaim.

:meth:`Reconciler.run_once` runs the phases in that order, each isolated: a phase that raises is
logged and audited (``phase-failed`` with its name and the error) and the next phase runs. A
lease gained while the pass runs (a takeover) is resumed at once on a thread of its own, beside
the pass (:mod:`.beside`): the previous holder's open ops wait neither for the unit of work in
flight (a create, a bootstrap call) nor for the rest of the pass; the provider joins the pass's
leased ones, between two phases, only once its resume ended. A pass that could not read its
inputs (controller not connected, no demand snapshot yet, a read that raised) runs no later
phase at all: nothing is created and nothing returned on a picture it does not have. Every
cloud mutation goes through the fenced :class:`~orchestrator.ops.executor.Executor`; a provider
whose lease is not valid is read (its facts count toward the gap and the budget) but never
changed. Time is the injected clock (wall seconds, the controller's clock); the pass returns a
:class:`PassReport`, which the daemon writes to its status file and metrics.

The host phases (bootstrap, join tracking, reclaim) live in :mod:`.hostphases`; the state a pass
reads and refreshes in :class:`~orchestrator.reconcile.passctx.PassContext`. docs/daemon.md ("The
reconcile pass") describes the phases for operators.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from orchestrator.errors import ControllerError, LeaseLost
from orchestrator.model.backoff import Backoff
from orchestrator.model.config import Config
from orchestrator.model.instances import new_op_id
from orchestrator.model.offerings import Placement
from orchestrator.ops.consoleresults import FirstBootOutcomes
from orchestrator.ops.executor import Bootstrap, Seen, StillLaunched, Wired
from orchestrator.ops.openops import OpenOp, open_ops
from orchestrator.reconcile import hostphases, refusedops
from orchestrator.reconcile.beside import GAIN_POLL, BesideResumes, Hold, no_hold
from orchestrator.reconcile.bootstraps import BootstrapTracker
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.budget import Usage
from orchestrator.reconcile.classify import FailureClass, classify_error
from orchestrator.reconcile.costs import month_spend
from orchestrator.reconcile.deciding import ScaleOutLock, coordinated
from orchestrator.reconcile.failedops import FailedOp, tell_failed_create
from orchestrator.reconcile.gap import gaps_from_ledger
from orchestrator.reconcile.health import Block, ProviderHealth
from orchestrator.reconcile.passctx import PassContext, ReadFailed, read_inputs
from orchestrator.reconcile.phases import beside_failed, join_beside, run_phase
from orchestrator.reconcile.phases import one_line as _one_line
from orchestrator.reconcile.poolphase import PoolPhase
from orchestrator.reconcile.refusals import RefusalMemory
from orchestrator.reconcile.report import PHASES, PassReport, PhaseOutcome
from orchestrator.reconcile.results import (
    BootstrapResult,
    CreatedOp,
    FailedCreate,
    GainedResume,
    JoinResult,
    PhaseResult,
    ReclaimResult,
    ResumedOp,
    ResumeResult,
    ScaleOutResult,
    Skipped,
    WaitingOp,
)
from orchestrator.reconcile.retry import retry_decision
from orchestrator.reconcile.scaleout import NO_LEASE, PolicyInputs, ScaleOutDecision, scale_out
from orchestrator.reconcile.scaleoutphase import ScaleOutRounds
from orchestrator.reconcile.view import Clock, ControllerView
from orchestrator.workspace.audit import audit
from orchestrator.workspace.sharedstore import cluster_documents

log = logging.getLogger(__name__)

# Re-exported: the pass's report types lived here before report.py.
__all__ = ["PHASES", "FailedOp", "PassReport", "PhaseOutcome", "Reconciler"]


class Reconciler:
    """Runs reconcile passes over one configuration (see the module docstring).

    ``bootstrap`` is the bootstrap play as a callable (the command line builds it from the
    Ansible services; tests script it); without one the bootstrap phase is skipped and hosts are
    expected to join by themselves. The executor must be built with ``bootstrap=None``: the
    pass bootstraps in its own phase, so each host's attempts are counted and retried.
    ``first_boot`` reads the consoles of first-boot hosts not joined (None: the deadline decides).

    ``hold`` holds a resume beside the pass as work in flight (the daemon's: a stop waits for it
    and refuses one not started yet); ``gain_poll``: how often a pass looks for a lease gained.

    Two threads share this object while a resume runs beside the pass: ``_books`` guards what
    both change (``failed``, ``_resumed``, ``health``), never held over a cloud or controller
    call. What else they share is safe as it is: each has its own :class:`PassContext` (the
    resume's a copy, :meth:`PassContext.beside`) and its own evidence; they act on different
    providers (the pass never on the resumed one, see :mod:`.beside`), hence on different
    working directories, desired sets and shared documents (the executor's per-provider shard
    objects are made on first use, one dict entry per provider, and the daemon makes all of them
    after its first pass, ``daemon/warmup.py``); the executor writes facts and audit
    entries under its own lock (``serial``, as for the shards of one op), ``terraform init``
    holds the plugin cache's lock, the shared store's connection is used under its session's
    lock and the controller link answers requests from any thread; an audit entry is one
    ``O_APPEND`` write.
    """

    def __init__(
        self,
        config: Config,
        ops: Wired,
        controller: ControllerView,
        *,
        clock: Clock,
        state_dir: Path,
        rng: random.Random | None = None,
        bootstrap: Bootstrap | None = None,
        first_boot: FirstBootOutcomes | None = None,
        scale_out_lock: ScaleOutLock | None = None,
        hold: Hold = no_hold,
        gain_poll: float = GAIN_POLL,
    ) -> None:
        self.config = config
        # With daemons sharing a database: one decides a scale-out at a time (deciding.py).
        self.scale_out_lock = scale_out_lock
        # The executor and the parts it was built from (fence, the config a reload replaces), as handed over.
        self.executor, self.parts = ops
        self.controller = controller
        self.clock = clock
        self.state_dir = Path(state_dir)
        self.rng = rng or random.Random()
        self.bootstrap = bootstrap
        self.first_boot = first_boot
        self.health = ProviderHealth(config.policy.retry, self.rng)
        # Breakers and bootstrap records: files under the state directory, or the shared store's.
        self.documents = cluster_documents(config, self.state_dir)
        self.breakers = Breakers.load(self.state_dir, config.policy.breaker, self.documents)
        self.tracker = BootstrapTracker.load(self.state_dir, self.documents)
        # What the cloud refused (capacity, quota), shared with every orchestrator (refusals.py).
        self.refusals = RefusalMemory.load(self.documents, config.policy, self.rng)
        self.failed: dict[str, FailedOp] = {}
        # Providers whose open ops were all resumed since their lease was last (re)gained.
        self._resumed: set[str] = set()
        # The pass and a resume beside it change failed, _resumed and health (class docstring).
        self._books = threading.RLock()
        self.hold = hold
        self.gain_poll = gain_poll
        self._read_problem = ""
        self._last_outcomes: dict[str, str] = {}

    # -- public ----------------------------------------------------------------------------------

    def run_once(self, trigger: str = "interval") -> PassReport:
        """One pass: every phase in order, each isolated; the report of what it saw and did."""
        started = self.clock()
        ctx: PassContext | None = None
        phases: list[PhaseOutcome] = []
        try:
            ctx = read_inputs(self.config, self.parts.fence, self.controller, self.clock)
            # `xceprov breaker reset` writes the file from another process: read it every pass,
            # or the next failure recorded here would write the old, open state over the reset.
            self.breakers = Breakers.load(self.state_dir, self.config.policy.breaker, self.documents)
            # Bootstrap records too: with the shared store, a provider taken over arrives with
            # the records its previous holder wrote (tried, given up, joined) since this started.
            self.tracker = BootstrapTracker.load(self.state_dir, self.documents)
            refusedops.refresh_memory(self.refusals, {p: ctx.facts(p) for p in self.config.providers}, ctx.read_at)
        except Exception as exc:  # every read failure means the same: act on nothing
            problem = _one_line(exc) if isinstance(exc, ReadFailed) else f"{type(exc).__name__}: {_one_line(exc)}"
            self._read_changed(problem)
            phases.append(PhaseOutcome("read", False, error=problem))
            phases += [PhaseOutcome(name, False, skipped=f"read failed: {problem}") for name in PHASES[1:]]
            finished = self.clock()
            blocked = self._blocked(finished)
            return PassReport(
                trigger, started, finished, phases, {}, [], [], blocked=blocked, refused=self.refusals.drain()
            )
        self._read_changed("")
        phases.append(PhaseOutcome("read", True, evidence=ctx.read_result()))
        steps: list[tuple[str, Callable[[PassContext], PhaseResult]]] = [
            ("resume", self._resume),
            ("scale-out", self._scale_out),
            ("bootstrap", self._bootstrap),
            ("join-tracking", self._join_tracking),
            ("reclaim", self._reclaim),
        ]
        not_leased = [p for p in sorted(self.config.providers) if p not in ctx.leased]
        with self._books:
            self._resumed -= set(not_leased)  # resumed in full once the lease comes back
        beside: BesideResumes[PhaseOutcome] = BesideResumes(
            not_leased,
            self.parts.fence.valid,
            partial(self._resume_beside, ctx),
            partial(beside_failed, self.state_dir),
            hold=self.hold,
            poll=self.gain_poll,
            limit=self.config.terraform.parallel_states,
        )
        beside.start()
        try:
            for name, step in steps:
                outcome = run_phase(self.state_dir, name, step, ctx)
                join_beside(ctx, phases, beside.collect())  # they ended during the phase: before it
                phases.append(outcome)
        finally:
            # No resume outlives its pass (one per provider at a time); a stop ends it (beside.py).
            rest = beside.finish()
        join_beside(ctx, phases, rest)
        finished = self.clock()
        return PassReport(
            trigger,
            started,
            finished,
            phases,
            ctx.gaps,
            list(ctx.ops),
            list(ctx.candidates),
            list(ctx.leased),
            list(ctx.decisions),
            self._blocked(finished),
            self.refusals.drain(),
        )

    def _blocked(self, now: float) -> list[Block]:
        """The providers passed over now (the pass's report carries them to the metrics)."""
        with self._books:
            return list(self.health.blocks(now))

    def reload(self, config: Config) -> None:
        """A good new configuration (SIGHUP): used from the next pass; provider failures forgotten."""
        self.config = config
        self.parts.config = config
        with self._books:
            self.health.settings = config.policy.retry
            self.health.clear()
        self.breakers.settings = config.policy.breaker
        self.refusals.configure(config.policy)
        audit(
            self.state_dir, "reconcile-reload", providers=sorted(config.providers), templates=sorted(config.templates)
        )

    # -- phases ----------------------------------------------------------------------------------

    def _resume(self, ctx: PassContext) -> ResumeResult:
        """Open ops: all of them once per lease gained; later only failed ones past their backoff."""
        return self._resume_providers(ctx, list(ctx.leased))

    def _resume_beside(self, parent: PassContext, provider: str) -> tuple[PhaseOutcome, bool]:
        """On a thread of its own (:mod:`.beside`): the resume of ``provider``, whose lease came
        while the pass runs, in a context of its own; whether the provider may join the pass
        (not when its lease went during the resume, nor when the resume raised: its open ops
        are resumed in full by the next pass, which holds the lease from its read)."""
        ctx = parent.beside(provider)  # its facts read again: the previous holder wrote since the read
        ended: list[bool] = []

        def step(c: PassContext) -> ResumeResult:
            result = self._resume_providers(c, [provider])
            ended.append(True)
            return result

        outcome = run_phase(self.state_dir, "resume", step, ctx)
        gained = replace(outcome.evidence, gained=[provider]) if isinstance(outcome.evidence, ResumeResult) else None
        outcome = replace(outcome, evidence=gained or GainedResume([provider]))
        return outcome, bool(ended) and provider in ctx.leased

    def _resume_providers(self, ctx: PassContext, providers: list[str]) -> ResumeResult:
        evidence = ResumeResult()
        for provider in providers:
            with self._books:
                full = provider not in self._resumed
            # What the survey read under the current lease: the first op attempted uses it rather
            # than listing the cloud again (one listing per resume: a takeover's first call sooner).
            seen: Seen | None = None
            if full:
                found = self.executor.survey(provider)
                seen = found.seen
                if found.untracked:
                    evidence.untracked[provider] = list(found.untracked)
            ops = open_ops(ctx.facts(provider))
            still_open = {o.op_id for o in ops}
            with self._books:
                for op_id in [k for k, f in self.failed.items() if f.provider == provider and k not in still_open]:
                    del self.failed[op_id]  # closed meanwhile (resumed by a full pass, or by hand)
            for op in ops:
                with self._books:
                    failed = self.failed.get(op.op_id)
                if failed is not None and not full:
                    action = self._retry_action(ctx, failed, op)
                    if action == "wait":
                        evidence.waiting.append(WaitingOp(op.op_id, failed.retry_at))
                        continue
                    listing = failed.failure == FailureClass.TRANSIENT.value
                    reason = f"not retried: {failed.error}"
                    if action == "abandon" and self._close(ctx, op, reason, check_listing=listing):
                        evidence.closed.append(op.op_id)
                        continue
                self._attempt(ctx, op, evidence, seen)
                seen = None  # read before this op's changes: never for the next op
            if full and provider in ctx.leased:  # a lease lost meanwhile: resumed in full later
                with self._books:
                    self._resumed.add(provider)
        return evidence

    def _retry_action(self, ctx: PassContext, failed: FailedOp, op: OpenOp) -> str:
        now = self.clock()
        if failed.kind != "create":
            return "wait" if now < failed.retry_at else "retry"
        usage = Usage.of(self.config, ctx.records())
        hold = refusedops.op_hold(
            self.refusals, self.config, op.provider, op, failed.failure, now
        )  # never on a held offering
        with self._books:
            decision = retry_decision(self.config, usage, self.health, failed.provider, failed.template, now, hold)
        return decision.action

    def _attempt(self, ctx: PassContext, op: OpenOp, evidence: ResumeResult, seen: Seen | None = None) -> None:
        ctx.stale(op.provider)  # before the change: a failure handler reads the facts again
        try:
            resolution = self.executor.resume_op(op, seen)
        except LeaseLost as exc:
            self._fenced(ctx, op.provider, op.op_id, exc)
            evidence.errors.append(f"op {op.op_id}: {_one_line(exc)}")
            return
        except ControllerError as exc:
            self._unreachable(op.provider, op.op_id, op.template, op.kind, exc)
            evidence.errors.append(f"op {op.op_id}: {_one_line(exc)}")
            return
        except Exception as exc:
            self._op_failed(ctx, op.provider, op.op_id, op.template, op.kind, exc)
            evidence.errors.append(f"op {op.op_id}: {_one_line(exc)}")
            return
        with self._books:
            self.failed.pop(op.op_id, None)
            if op.kind == "create":
                self.health.succeeded(op.provider, op.template)
        if op.kind == "create" and resolution.outcome == "completed":
            made = lambda: refusedops.created_keys(ctx.facts(op.provider), op.pending)  # noqa: E731 (read when needed)
            refusedops.record_success(
                self.refusals, self.config, op.provider, op.template, op.op_id, lambda: op.detail, made
            )
        evidence.resumed.append(ResumedOp(op.op_id, resolution.outcome, resolution.reason))

    def _scale_out(self, ctx: PassContext) -> ScaleOutResult | Skipped:
        """The scale-out phase, under the shared store's scale-out lock when there is one."""
        return coordinated(self.scale_out_lock, ctx, sorted(self.config.providers), self._scale_out_now)

    def _scale_out_now(self, ctx: PassContext) -> ScaleOutResult:
        """Gap → policy → creates, in rounds; a refused create falls back at once (:mod:`.scaleoutphase`)."""
        pool = PoolPhase(
            self.config, self.executor, self.state_dir, self._inputs, self._create, self._op_failed, self._fenced,
            self._unreachable,
        )  # fmt: skip
        rounds = ScaleOutRounds(self.config, self.state_dir, pool, self._decide, self._create, self._last_outcomes)
        # Every round decides as of the phase's start (scaleoutphase.py says why).
        return rounds.run(ctx, self.clock())

    def _decide(
        self, ctx: PassContext, now: float, fallback: frozenset[str], refused: frozenset[tuple[str, str]]
    ) -> tuple[PolicyInputs, list[ScaleOutDecision]]:
        with self._books:  # the policy reads health and the failed ops a resume beside may change
            inputs = self._inputs(ctx, now, fallback, refused)
            return inputs, scale_out(self.config, inputs)

    def _inputs(
        self,
        ctx: PassContext,
        now: float,
        fallback: frozenset[str] = frozenset(),
        refused: frozenset[tuple[str, str]] = frozenset(),
    ) -> PolicyInputs:
        """The policy's inputs as the facts are now (the gap recomputed from them); ``select:``
        offerings as the executor renders them (its parts' catalogue selections)."""
        records, chosen = ctx.records(), self.parts.selected() if self.parts.selected is not None else {}
        gaps = gaps_from_ledger(ctx.snapshot, records)
        month = month_spend(self.config, {p: ctx.facts(p) for p in self.config.providers}, now, chosen)
        with self._books:
            unavailable = self._unavailable(ctx)
            return PolicyInputs(
                gaps,
                records,
                self.health,
                self.breakers,
                now,
                unavailable,
                fallback,
                refused,
                self.refusals,
                chosen,
                month,
            )

    def _unavailable(self, ctx: PassContext) -> dict[str, str]:
        """Providers the policy must pass over in this round, and why (under ``_books``)."""
        # A provider gained during the pass is not leased until its resume beside ended.
        out = {p: NO_LEASE for p in self.config.providers if p not in ctx.leased}
        for failed in self.failed.values():
            # One failing op per provider at a time: a new op would plan the waiting op's keys too.
            out.setdefault(failed.provider, f"op {failed.op_id} awaits its retry at {failed.retry_at:.0f}")
        return out

    def _create(
        self,
        ctx: PassContext,
        provider: str,
        template: str,
        count: int,
        evidence: ScaleOutResult,
        pool: bool = False,
        placements: tuple[Placement, ...] = (),
    ) -> bool:
        """One create (``pool``: into the warm pool, on the default offering; ``placements``: the
        offerings of its keys); True when it was refused and closed (its hosts may be asked for elsewhere)."""
        op_id = new_op_id(self.clock())
        ctx.stale(provider)  # before the change: the failure handler reads the op's facts
        try:
            result = self.executor.create(provider, template, count, op_id=op_id, pool=pool, placements=placements)
        except LeaseLost as exc:
            self._fenced(ctx, provider, op_id, exc)
            evidence.errors.append(f"op {op_id}: {_one_line(exc)}")
            return False
        except ControllerError as exc:
            ctx.ops.append(op_id)
            self._unreachable(provider, op_id, template, "create", exc)
            evidence.errors.append(f"op {op_id}: {_one_line(exc)}")
            return False
        except Exception as exc:
            ctx.ops.append(op_id)
            closed = self._op_failed(ctx, provider, op_id, template, "create", exc)
            evidence.failed.append(FailedCreate(op_id, provider, _one_line(exc), closed))
            return closed
        ctx.ops.append(op_id)
        with self._books:
            self.health.succeeded(provider, template)
        detail = lambda: refusedops.intent_detail(ctx.facts(provider), op_id)  # noqa: E731 (read only when needed)
        refusedops.record_success(
            self.refusals, self.config, provider, template, op_id, detail, lambda: [c.key for c in result.created]
        )
        fields = {"op_id": op_id, "provider": provider, "template": template, "phase": "scale-out"}
        log.info("op %s created %d hosts of %s on %s", op_id, len(result.created), template, provider, extra=fields)
        (evidence.pooled if pool else evidence.created).append(
            CreatedOp(op_id, provider, template, len(result.created))
        )
        return False

    def _op_failed(self, ctx: PassContext, provider: str, op_id: str, template: str, kind: str, exc: Exception) -> bool:
        """Classify, mark the provider, decide retry or close; True when the op was closed."""
        now = self.clock()
        error = _one_line(exc)
        with self._books:
            previous = self.failed.get(op_id)
        attempts = (previous.attempts if previous else 0) + 1
        if kind != "create":
            delay = Backoff.from_settings(self.config.policy.retry).delay(attempts, self.rng)
            with self._books:
                self.failed[op_id] = FailedOp(op_id, provider, template, kind, attempts, now + delay, error)
            audit(self.state_dir, "reconcile-op-failed", provider=provider, op=op_id, kind=kind, error=error)
            return False
        failure = classify_error(exc)
        usage = Usage.of(self.config, ctx.records())  # before the lock: it may read the controller
        op = next((o for o in open_ops(ctx.facts(provider)) if o.op_id == op_id), None)
        refusedops.record_refusal(self.refusals, self.config, provider, op, exc, failure, now)
        hold = refusedops.op_hold(self.refusals, self.config, provider, op, failure.kind.value, now)
        with self._books:
            retry_at = self.health.failed(provider, template, failure, now)
            decision = retry_decision(self.config, usage, self.health, provider, template, now, hold)
            failed = FailedOp(op_id, provider, template, kind, attempts, retry_at, error, failure.kind.value)
            self.failed[op_id] = failed
        tell_failed_create(self.state_dir, failed, failure, decision)
        if decision.action != "abandon":
            return False
        if op is None:
            with self._books:
                self.failed.pop(op_id, None)  # refused before its intent: nothing to close
            return True
        # A refusal (capacity, quota, permanent) says the cloud made none of the failed
        # instances; after transient failures a lost response is possible, so the listing is read.
        listing = failure.kind == FailureClass.TRANSIENT
        return self._close(ctx, op, f"{failure.kind.value}: {error}", check_listing=listing)

    def _close(self, ctx: PassContext, op: OpenOp, reason: str, *, check_listing: bool = True) -> bool:
        ctx.stale(op.provider)
        try:
            self.executor.close_refused(op, reason, check_listing=check_listing)
        except StillLaunched as exc:
            audit(self.state_dir, "reconcile-op-kept-open", provider=op.provider, op=op.op_id, reason=str(exc))
            return False
        except Exception as exc:  # the cloud could not be read or planned: the op stays open, tried later
            why = f"{type(exc).__name__}: {_one_line(exc)}"
            audit(self.state_dir, "reconcile-op-kept-open", provider=op.provider, op=op.op_id, reason=why)
            return False
        with self._books:
            self.failed.pop(op.op_id, None)
        return True

    def _unreachable(self, provider: str, op_id: str, template: str, kind: str, exc: ControllerError) -> None:
        """The controller went away mid-op (a failover): not the cloud's fault, retried at once."""
        with self._books:
            previous = self.failed.get(op_id)
            attempts = (previous.attempts if previous else 0) + 1
            self.failed[op_id] = FailedOp(op_id, provider, template, kind, attempts, self.clock(), _one_line(exc))
        audit(self.state_dir, "reconcile-op-interrupted", provider=provider, op=op_id, reason=_one_line(exc))

    def _fenced(self, ctx: PassContext, provider: str, op_id: str, exc: LeaseLost) -> None:
        """The lease went mid-op: the op stays open and is resumed once the lease is back."""
        ctx.lost(provider)
        with self._books:
            self._resumed.discard(provider)
        audit(self.state_dir, "reconcile-op-fenced", provider=provider, op=op_id, reason=_one_line(exc))

    def _bootstrap(self, ctx: PassContext) -> BootstrapResult | Skipped:
        if self.bootstrap is None:
            return Skipped("no bootstrap play configured: hosts join by themselves")
        return hostphases.bootstrap_phase(self._host_phases(ctx), self.bootstrap)

    def _join_tracking(self, ctx: PassContext) -> JoinResult:
        return hostphases.join_phase(self._host_phases(ctx))

    def _reclaim(self, ctx: PassContext) -> ReclaimResult:
        return hostphases.reclaim_phase(self._host_phases(ctx))

    def _host_phases(self, ctx: PassContext) -> hostphases.HostPhases:
        return hostphases.HostPhases(
            self.config,
            self.executor,
            self.parts,
            ctx,
            self.tracker,
            self.breakers,
            self.clock,
            self.rng,
            self.state_dir,
            self.first_boot,
        )

    def _read_changed(self, problem: str) -> None:
        """Audit a read failure when it starts or changes, and the recovery once (not every pass)."""
        if problem == self._read_problem:
            return
        if problem:
            audit(self.state_dir, "reconcile-read-failed", error=problem, skipped=list(PHASES[1:]))
        else:
            audit(self.state_dir, "reconcile-read-ok", previous=self._read_problem)
        self._read_problem = problem
