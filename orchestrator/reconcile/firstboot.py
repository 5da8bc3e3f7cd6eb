"""First-boot results in the join-tracking phase: what each first-boot host not joined says.

A host of a template with ``bootstrap: {mode: first-boot}`` gets no play; the join-tracking
phase waits for it as for every expected host, and for those not joined and not past their
``join_deadline`` it asks the provider's consoles (``ops.firstboot.ConsoleResults``, handed to
the reconciler as ``first_boot``) what their boot printed:

* ``failed`` at a step: counted like a push bootstrap that failed for good: the record is given
  up (``outcome`` ``failed: first boot failed at step S: ...``), the template's breaker counts a
  bootstrap failure, and the host is returned through the executor as a given-up pushed host
  is (audit ``reconcile-bootstrap-gave-up``, reason ``first boot failed``). A boot is not
  retried in place: the next host comes from the demand, as for any returned host;
* ``started`` (not joined yet), ``no-result``, ``unreadable``: recorded, shown, waited for; the
  join deadline returns a host that never joins (join tracking, unchanged);
* ``joined``: set by join tracking when the controller matches the host.

An outcome is written to the bootstrap records (``first_boot``, ``first_boot_line``) and
audited (``reconcile-first-boot``) only when it changes, so a pass over a waiting burst writes
nothing new. The status file, the metrics and ``xceprov status`` read the records.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from orchestrator.model.backoff import Backoff
from orchestrator.model.bootresult import FirstBootKind, FirstBootOutcome
from orchestrator.model.config import Config
from orchestrator.model.facts import Fact
from orchestrator.ops.consoleresults import FirstBootOutcomes
from orchestrator.ops.executor import Created
from orchestrator.reconcile.bootstraps import BootstrapRecord, BootstrapTracker
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.results import FirstBootFailure, JoinResult
from orchestrator.reconcile.view import Clock

FIRST_BOOT_FAILED = "first boot failed"
log = logging.getLogger(__name__)


class Phases(Protocol):
    """What this part of join tracking uses of the host phases (``hostphases.HostPhases``)."""

    config: Config
    tracker: BootstrapTracker
    breakers: Breakers
    rng: random.Random
    first_boot: FirstBootOutcomes | None

    @property
    def clock(self) -> Clock:
        """The pass's wall clock."""
        ...

    def audit(self, action: str, **details: Any) -> None:
        """One audit entry."""
        ...

    def give_back(self, provider: str, keys: Sequence[str], reason: str, errors: list[str]) -> str:
        """Return ``keys`` through the executor; the op id ("" when it failed)."""
        ...


def first_boot_template(config: Config, template: str) -> bool:
    """Whether hosts of ``template`` join by themselves at first boot."""
    found = config.templates.get(template)
    return found is not None and found.bootstrap.mode == "first-boot"


def joined_record(config: Config, record: BootstrapRecord) -> BootstrapRecord:
    """``record`` of a host that just joined, with ``joined`` as its first-boot outcome when it is one."""
    if not first_boot_template(config, record.template):
        return record
    return replace(record, first_boot=FirstBootKind.JOINED.value, first_boot_line="joined")


def read_first_boot(phases: Phases, provider: str, not_joined: Sequence[Fact], evidence: JoinResult) -> None:
    """Read, record and act on the outcomes of ``provider``'s first-boot hosts in ``not_joined``
    (expected, not joined, not past their deadline); see the module docstring."""
    read = phases.first_boot
    tracker = phases.tracker
    waiting = [
        f
        for f in not_joined
        if first_boot_template(phases.config, f.template)
        and not tracker.get(f.instance_key, provider, f.template, f.host_name).gave_up
    ]
    if read is None or not waiting:
        return
    try:
        outcomes = read(provider, [_created(f) for f in waiting])
    except Exception as exc:  # a reader's failure never stops the phase
        evidence.errors.append(f"first-boot results on {provider}: {type(exc).__name__}: {_line(exc)}")
        return
    now = phases.clock()
    seen: list[BootstrapRecord] = []
    failed: list[tuple[Fact, BootstrapRecord, FirstBootOutcome]] = []
    shown: dict[str, FirstBootOutcome] = {}
    for fact in waiting:
        outcome = outcomes.get(fact.instance_key)
        record = tracker.get(fact.instance_key, provider, fact.template, fact.host_name)
        if outcome is None or (record.first_boot, record.first_boot_line) == (outcome.kind.value, outcome.line()):
            continue
        record = replace(record, first_boot=outcome.kind.value, first_boot_line=outcome.line())
        shown[fact.host_name] = outcome
        if outcome.kind == FirstBootKind.FAILED:
            failed.append((fact, record, outcome))
        else:
            seen.append(record)
    tracker.first_boot_seen(seen)
    give_up: list[str] = []
    settings = phases.config.policy.retry
    for fact, record, outcome in failed:
        # One attempt is all a first boot has: the record is given up at once, as a push
        # bootstrap is after its last attempt.
        line = outcome.bootstrap_outcome()
        tracker.record(record, line, now, attempts=1, backoff=Backoff.from_settings(settings), rng=phases.rng)
        phases.breakers.failure(fact.template, "bootstrap", f"{fact.host_name}: {line}", now)
        give_up.append(fact.instance_key)
        fields = {
            "provider": provider,
            "template": fact.template,
            "instance": fact.instance_id,
            "phase": "join-tracking",
        }
        log.warning("host %s: %s", fact.host_name, line, extra=fields)  # the host's text: an argument
    if shown:
        phases.audit(
            "reconcile-first-boot",
            provider=provider,
            hosts={name: outcome.to_json() for name, outcome in sorted(shown.items())},
        )
        evidence.first_boot.update({name: outcome.line() for name, outcome in shown.items()})
    if give_up:
        op = phases.give_back(provider, give_up, FIRST_BOOT_FAILED, evidence.errors)
        phases.audit(
            "reconcile-bootstrap-gave-up", provider=provider, keys=sorted(give_up), op=op, reason=FIRST_BOOT_FAILED
        )
        evidence.first_boot_failed.extend(
            FirstBootFailure(provider, f.template, f.host_name, f.instance_key, o.step, o.message, op)
            for f, _record, o in failed
        )


def _created(fact: Fact) -> Created:
    return Created(fact.instance_key, fact.instance_id, fact.host_name, fact.address, fact.template, fact.join_deadline)


def _line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
