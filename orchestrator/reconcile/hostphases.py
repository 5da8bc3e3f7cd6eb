"""The host phases of a pass: bootstrap, join tracking, reclaim.

* **bootstrap**: every expected host of a leased provider that has not joined and is due
  (:mod:`.bootstraps`: never tried, or failed and past its backoff) goes to the bootstrap play,
  at most ``ansible.forks`` hosts per call. A host that failed ``policy.retry.attempts`` times is
  returned and counts as a bootstrap failure of its template's breaker. A host the play did not
  finish because the daemon stopped it (outcome ``stopped: ...``) is recorded as not bootstrapped
  and is due again at the next start; that counts as no attempt.
* **join tracking**: a host's first join closes its template's breaker count
  (``breaker.success``); an expected host past its ``join_deadline`` that never joined is
  returned (orphan class (a): no job can be on it) and counts as a join failure. First-boot
  hosts not joined yet have their consoles read (:mod:`.firstboot`): one whose boot failed is
  returned and counts as a bootstrap failure.
* **reclaim** (:mod:`.reclaim` selects): each chosen host that runs no work is closed at the
  controller; the controller's answer decides. ``closed``: it is returned at once. ``closing``:
  work arrived between the decision and the close, so the host is kept, its work runs on, and the
  pass does not wait for it; it comes back as ``closed`` once the work ends and is returned then.

Every return goes through the executor (fenced, drained: closed hosts only, never waited on),
one op per provider and phase. Every decision is audited with its evidence.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.clients.controller.types import HostInfo
from orchestrator.errors import LeaseLost
from orchestrator.model.backoff import Backoff
from orchestrator.model.config import Config
from orchestrator.model.facts import Epoch, Fact
from orchestrator.model.progress import GOOD_HOST_OUTCOMES, STOPPED
from orchestrator.ops.consoleresults import FirstBootOutcomes
from orchestrator.ops.drain import DrainSettings
from orchestrator.ops.executor import Bootstrap, Created, Executor, OpParts
from orchestrator.ops.hosts import JOINED_STATES
from orchestrator.reconcile.bootstraps import OK, BootstrapRecord, BootstrapTracker
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.firstboot import joined_record, read_first_boot
from orchestrator.reconcile.passctx import PassContext
from orchestrator.reconcile.reclaim import ReclaimCandidate, hosts_by_key, reclaim_candidates
from orchestrator.reconcile.results import BootstrapResult, HostBootstrap, JoinResult, KeptHost, ReclaimResult
from orchestrator.reconcile.view import Clock
from orchestrator.workspace.audit import audit

# A return from the loop never waits: it only takes hosts that run no work (closed, or never
# joined); a host that is running work after all makes the op fail at once, before any change.
NO_WAIT = DrainSettings(drain=True, timeout=0.0, policy="wait")
T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass
class HostPhases:
    """What the host phases share: configuration, executor, the pass, durable state, time."""

    config: Config
    executor: Executor
    parts: OpParts  # the executor's: its fence and host control
    ctx: PassContext
    tracker: BootstrapTracker
    breakers: Breakers
    clock: Clock
    rng: random.Random
    state_dir: Path
    # Reads first-boot hosts' consoles (ops.firstboot); None: their results are not read.
    first_boot: FirstBootOutcomes | None = None

    def audit(self, action: str, **details: Any) -> None:
        """One audit entry."""
        audit(self.state_dir, action, **details)

    def known(self) -> dict[str, HostInfo]:
        """The controller's hosts (as read by the pass) by instance key and id."""
        return hosts_by_key(self.ctx.hosts)

    def give_back(self, provider: str, keys: Sequence[str], reason: str, errors: list[str]) -> str:
        """Return ``keys`` of ``provider`` through the executor; the op id ("" when it failed)."""
        if not keys:
            return ""
        self.ctx.stale(provider)
        what = f"return of {', '.join(sorted(keys))} on {provider}"
        result = self.guarded(
            provider,
            what,
            errors,
            lambda: self.executor.return_instances(provider, sorted(keys), drain=NO_WAIT, reason=reason),
        )
        if result is None:
            return ""
        self.ctx.ops.append(result.op_id)
        return result.op_id

    def guarded(self, provider: str, what: str, errors: list[str], call: Callable[[], T]) -> T | None:
        """``call()``, or None with the error in ``errors`` (a lost lease ends the provider's pass)."""
        try:
            return call()
        except LeaseLost as exc:
            self.ctx.lost(provider)
            errors.append(f"{what}: {_line(exc)}")
        except Exception as exc:  # one host's or provider's failure never stops the phase
            errors.append(f"{what}: {_line(exc)}")
        return None


def joined(host: HostInfo | None) -> bool:
    """Whether the controller saw the host's worker join (now or before)."""
    return host is not None and (host.joined_at > 0 or host.state in JOINED_STATES)


def bootstrap_phase(phases: HostPhases, bootstrap: Bootstrap) -> BootstrapResult:
    """Bootstrap the due hosts of every leased provider (see the module docstring)."""
    evidence = BootstrapResult()
    known = phases.known()
    retry = phases.config.policy.retry
    for provider in list(phases.ctx.leased):
        now = phases.clock()
        due: list[Fact] = []
        for fact in phases.ctx.expected(provider):
            record = phases.tracker.get(fact.instance_key, provider, fact.template, fact.host_name)
            if not joined(known.get(fact.instance_key)) and record.due(now):
                due.append(fact)
        give_up: list[str] = []
        forks = phases.config.ansible.forks
        for start in range(0, len(due), forks):
            batch = [_created(f) for f in due[start : start + forks]]
            outcomes = _run_bootstrap(bootstrap, provider, batch)
            now = phases.clock()
            for item in batch:
                outcome = _normal(outcomes.get(item.name) or "failed: the play reported no outcome for this host")
                record = phases.tracker.get(item.key, provider, item.template, item.name)
                host_fields = {"provider": provider, "template": item.template, "instance": item.instance_id}
                host_fields["phase"] = "bootstrap"
                if outcome.startswith(STOPPED):
                    phases.tracker.stopped([record], outcome, now)
                    evidence.hosts[item.name] = HostBootstrap(outcome, record.attempts, "again")
                    log.info("host %s not bootstrapped: %s", item.name, outcome, extra=host_fields)
                    continue
                attempt = phases.tracker.record(
                    record, outcome, now, attempts=retry.attempts, backoff=Backoff.from_settings(retry), rng=phases.rng
                )
                if outcome == OK:
                    log.info("host %s bootstrapped (attempt %d)", item.name, attempt.record.attempts, extra=host_fields)
                else:  # the play's text is data: an argument, never the format
                    tries = f"attempt {attempt.record.attempts} of {retry.attempts}, next: {attempt.action}"
                    log.warning("host %s bootstrap failed (%s): %s", item.name, tries, outcome, extra=host_fields)
                evidence.hosts[item.name] = HostBootstrap(outcome, attempt.record.attempts, attempt.action)
                if attempt.action == "give-up":
                    give_up.append(item.key)
                    state = phases.breakers.failure(item.template, "bootstrap", f"{item.name}: {outcome}", now)
                    evidence.breakers[item.template] = state.position.value
            phases.audit(
                "reconcile-bootstrap",
                provider=provider,
                hosts={i.name: outcomes.get(i.name, "") for i in batch},
                records=[phases.tracker.get(i.key, provider, i.template, i.name).evidence() for i in batch],
            )
        if give_up:
            reason = f"bootstrap failed {retry.attempts} times"
            op = phases.give_back(provider, give_up, reason, evidence.errors)
            phases.audit("reconcile-bootstrap-gave-up", provider=provider, keys=sorted(give_up), op=op, reason=reason)
            fields = {"provider": provider, "op_id": op, "phase": "bootstrap"}
            log.warning("%d hosts given up after %s; returned by op %s", len(give_up), reason, op or "-", extra=fields)
            if op:
                evidence.returned.extend(sorted(give_up))
    return evidence


def _normal(outcome: str) -> str:
    """``ok`` for every outcome of a host the play finished well (``changed`` is done too)."""
    return OK if outcome.split(":", 1)[0] in GOOD_HOST_OUTCOMES else outcome


def _created(fact: Fact) -> Created:
    return Created(fact.instance_key, fact.instance_id, fact.host_name, fact.address, fact.template, fact.join_deadline)


def _run_bootstrap(bootstrap: Bootstrap, provider: str, batch: Sequence[Created]) -> Mapping[str, str]:
    """The play's outcome per host; a play that fails as a whole fails every host of the batch."""
    try:
        return dict(bootstrap(provider, batch))
    except Exception as exc:  # AnsibleError and anything else: a per-host failure, retried
        return {c.name: f"failed: {type(exc).__name__}: {_line(exc)}" for c in batch}


def join_phase(phases: HostPhases) -> JoinResult:
    """Count first joins; return expected hosts past their ``join_deadline`` (class (a))."""
    evidence = JoinResult()
    known = phases.known()
    for provider in list(phases.ctx.leased):
        now = phases.clock()
        overdue: list[Fact] = []
        waiting: list[Fact] = []
        first_joins: list[BootstrapRecord] = []
        for fact in phases.ctx.expected(provider):
            record = phases.tracker.get(fact.instance_key, provider, fact.template, fact.host_name)
            if joined(known.get(fact.instance_key)):
                if not record.joined:
                    first_joins.append(joined_record(phases.config, record))
                continue
            if fact.join_deadline and now > fact.join_deadline:
                overdue.append(fact)
            else:
                waiting.append(fact)
        # First-boot hosts still waited for: what their consoles say (reconcile/firstboot.py).
        read_first_boot(phases, provider, waiting, evidence)
        # One write for all first joins (after a restart they can be every host of the site).
        for record in phases.tracker.joined(first_joins):
            phases.breakers.success(record.template, now)
            evidence.joined.append(record.host_name)
            host_fields = {"provider": provider, "template": record.template, "phase": "join-tracking"}
            log.info("host %s joined the controller", record.host_name, extra=host_fields)
        if not overdue:
            continue
        details = [
            {
                "key": f.instance_key,
                "host": f.host_name,
                "instance": f.instance_id,
                "join_deadline": f.join_deadline,
                "now": now,
                "state": (known[f.instance_key].state if f.instance_key in known else "unknown to the controller"),
                "bootstrap": phases.tracker.get(f.instance_key, provider, f.template, f.host_name).outcome,
                "first_boot": phases.tracker.get(f.instance_key, provider, f.template, f.host_name).first_boot_line,
            }
            for f in overdue
        ]
        reason = "orphan class (a): never joined by its join_deadline"
        op = phases.give_back(provider, [f.instance_key for f in overdue], reason, evidence.errors)
        phases.audit("reconcile-join-overdue", provider=provider, hosts=details, op=op, reason=reason)
        for d in details:
            fields = {
                "provider": provider,
                "instance": d["instance"],
                "timeout": "join_deadline",
                "phase": "join-tracking",
            }
            log.warning("join_deadline passed: %s never joined; returned by op %s", d["host"], op or "-", extra=fields)
        evidence.overdue.extend(f.host_name for f in overdue)
        if op:
            evidence.returned.extend(f.instance_key for f in overdue)
            for f in overdue:
                phases.breakers.failure(f.template, "join", f"{f.host_name}: not joined by {f.join_deadline:.0f}", now)
    # Records of hosts that are gone (returned, lost) are of no more use: the file stays small.
    live = (r.key for r in phases.ctx.records() if not r.gone)
    evidence.forgotten.extend(phases.tracker.prune(live, phases.config.providers))
    return evidence


def reclaim_phase(phases: HostPhases) -> ReclaimResult:
    """Close and return idle, old and closed hosts; keep those that turned busy."""
    now = phases.clock()
    candidates = reclaim_candidates(phases.config, phases.ctx.records(), phases.ctx.hosts, now)
    phases.ctx.candidates = candidates
    evidence = ReclaimResult(candidates=len(candidates))
    known = phases.known()
    by_provider: dict[str, list[ReclaimCandidate]] = {}
    for c in candidates:
        by_provider.setdefault(c.provider, []).append(c)
    for provider, group in sorted(by_provider.items()):
        if provider not in phases.ctx.leased:
            evidence.kept.extend(KeptHost(c.host_name, "no valid lease") for c in group)
            continue
        try:
            epoch = phases.parts.fence.gate(provider)
        except LeaseLost as exc:
            phases.ctx.lost(provider)
            evidence.errors.append(f"reclaim on {provider}: {_line(exc)}")
            continue
        chosen: list[ReclaimCandidate] = []
        kept: list[KeptHost] = []
        for c in group:
            answer = _close(phases, provider, epoch, c, known.get(c.key), evidence.errors)
            host_fields = {"provider": provider, "template": c.template, "phase": "reclaim"}
            if answer == "closed":
                chosen.append(c)
                log.info("reclaim: host %s (%s) is returned: %s", c.host_name, c.key, c.reason, extra=host_fields)
            elif answer:
                kept.append(KeptHost(c.host_name, answer, c.key, c.reason))
                log.info("reclaim: host %s (%s) is kept: %s", c.host_name, c.key, answer, extra=host_fields)
        reason = "reclaim: " + ", ".join(sorted({c.reason for c in chosen}))
        op = phases.give_back(provider, [c.key for c in chosen], reason, evidence.errors)
        phases.audit(
            "reconcile-reclaim",
            provider=provider,
            op=op,
            returned=[c.to_json() for c in chosen],
            kept=[k.to_json() for k in kept],
        )
        evidence.kept.extend(kept)
        if op:
            evidence.returned.extend(c.key for c in chosen)
            fields = {"provider": provider, "op_id": op, "phase": "reclaim"}
            log.info("%d hosts returned by op %s (%s); %d kept", len(chosen), op, reason, len(kept), extra=fields)
    return evidence


def _close(
    phases: HostPhases,
    provider: str,
    epoch: Epoch,
    candidate: ReclaimCandidate,
    host: HostInfo | None,
    errors: list[str],
) -> str:
    """``closed`` when the host may be returned now, else why it is kept ("" after an error)."""
    if host is None or not joined(host) or candidate.state == "closed":
        return "closed"  # never joined (no work can be on it), or already closed and idle
    if candidate.state == "closing":
        return "closing: its work still runs"
    if candidate.state not in ("idle", "busy"):
        return f"{candidate.state}: not returned by reclaim (the host-loss check decides)"
    answer = phases.guarded(
        provider,
        f"close of {candidate.host_name}",
        errors,
        lambda: phases.parts.hosts.close(provider, epoch, host, f"reclaim: {candidate.reason}"),
    )
    if answer is None:
        return ""
    if answer == "closed":
        return "closed"
    # The controller decides: work started on the host after it was chosen; it keeps running.
    return f"{answer}: turned busy before the close"


def _line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
