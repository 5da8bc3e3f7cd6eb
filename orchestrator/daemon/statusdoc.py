"""What the daemon says about itself after every pass: the status document and the metrics from it.

:func:`build_document` gathers the last pass's report, the leases as the keeper holds them (with
their remaining validity, and who holds a lease this daemon does not), the breakers from their
durable file, this orchestrator's instances by state, the bootstrap's share of them
(:func:`bootstrap_share`), the first-boot hosts' outcomes (:func:`first_boot_share`), the open
ops and the reclaim candidates;
``orchestrator.workspace.daemonstatus`` writes it and ``xceprov status`` reads it.
:func:`update_metrics` sets the Prometheus metrics from the same document, so the two never
disagree. Pure functions over their inputs (no I/O), tested in tests/unit/daemon.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from orchestrator.clients.controller.lease import LeaseStatus
from orchestrator.clients.controller.types import HostInfo
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.passfigures import PassFigures, TemplateRow
from orchestrator.daemon.timeouts import NamedTimeout
from orchestrator.model.bootresult import FirstBootKind
from orchestrator.model.config import Config
from orchestrator.model.facts import Fact
from orchestrator.model.progress import STOPPED
from orchestrator.ops.hosts import JOINED_STATES
from orchestrator.ops.openops import open_ops
from orchestrator.reconcile.bootstraps import BootstrapRecord
from orchestrator.reconcile.breaker import Breakers, Position
from orchestrator.reconcile.costs import spend_document
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.offered import offering_usage
from orchestrator.reconcile.offers import NOTHING_SELECTED, Selected
from orchestrator.reconcile.pool import pools, target
from orchestrator.reconcile.refusals import RefusalMemory
from orchestrator.reconcile.report import PassReport

# Instance states only the facts know (the controller has no host for the key yet):
REQUESTED = "requested"  # intent committed, no instanceCreated yet
CREATED = "created"  # instanceCreated committed, expectedHost not yet
POOL = "pool"  # waiting stopped in a warm pool (or on its way there)


def lease_rows(statuses: Iterable[LeaseStatus]) -> list[dict[str, Any]]:
    """Each lease: held or not, epoch, remaining validity, TTL, and who holds it / why not."""
    rows = []
    for s in sorted(statuses, key=lambda x: x.provider):
        rows.append(
            {
                "provider": s.provider,
                "held": s.held,
                "epoch": s.epoch.tag() if s.epoch is not None and s.held else None,
                "remaining": round(s.expires_in, 3) if s.held else 0.0,
                "ttl": s.ttl,
                # Held: this daemon's instance id. Not held: the holder the controller named, or
                # the last error (the keeper keeps asking either way).
                "holder": s.holder if s.held else "",
                "note": "" if s.held else s.holder,
            }
        )
    return rows


def instance_states(facts: Mapping[str, Sequence[Fact]], hosts: Iterable[HostInfo]) -> dict[str, dict[str, int]]:
    """Per provider, this orchestrator's instances not gone by state: the controller's host state
    (``expected``, ``idle``, ``busy``, ``closing``, ...) when it knows the host, else how far the
    facts got (``requested``, ``created``)."""
    by_key = {h.instance_key: h for h in hosts if h.instance_key}
    out: dict[str, dict[str, int]] = {}
    for provider, provider_facts in sorted(facts.items()):
        counts: Counter[str] = Counter()
        for record in ledger(provider_facts).values():
            if record.gone:
                continue
            host = by_key.get(record.key)
            if host is not None and host.state:
                counts[host.state] += 1
            elif record.in_pool:
                counts[POOL] += 1
            elif record.expected is not None:
                counts["expected"] += 1
            elif record.created is not None:
                counts[CREATED] += 1
            else:
                counts[REQUESTED] += 1
        out[provider] = dict(sorted(counts.items()))
    return out


# Every state an instance of this orchestrator can be in: each provider has a metric sample for
# each from the start (0 when none), so a dashboard shows 0, not "no data", for an idle provider.
INSTANCE_STATES = (REQUESTED, CREATED, POOL, "expected", *sorted(JOINED_STATES))


def cost_per_hour(facts: Mapping[str, Sequence[Fact]], config: Config) -> dict[str, dict[str, float]]:
    """Per provider and template, ``cost_per_hour`` summed over the instances the budgets count
    (``reconcile.budget``: not gone, live, in flight or of an op whose outcome is unknown), each
    at its offering's price (``reconcile.offered``); every template the provider offers is
    named, 0 when none runs."""
    usage = offering_usage(config, facts)
    out: dict[str, dict[str, float]] = {}
    for provider in sorted(facts):
        row = {name: 0.0 for name, template in sorted(config.templates.items()) if provider in template.providers}
        for template, offerings in usage.get(provider, {}).items():
            row[template] = row.get(template, 0.0) + sum(o["cost_per_hour"] for o in offerings.values())
        out[provider] = {template: round(cost, 6) for template, cost in row.items()}
    return out


def pool_sizes(facts: Mapping[str, Sequence[Fact]], config: Config) -> dict[str, dict[str, dict[str, int]]]:
    """Per provider and template, its warm pool: ``stopped`` (made, waiting), ``pending`` (a fill
    on its way) and ``target`` (``warm_pool``); every pool with a target or a member."""
    records = [r for provider_facts in facts.values() for r in ledger(provider_facts).values()]
    out: dict[str, dict[str, dict[str, int]]] = {}
    for (provider, template), members in pools(config, records).items():
        made = sum(r.created is not None for r in members)
        row = {"stopped": made, "pending": len(members) - made, "target": target(config, provider, template)}
        out.setdefault(provider, {})[template] = row
    return out


# The bootstrap's share of the created instances, in this order (docs/daemon.md, "Status file").
BOOTSTRAP_STATES = ("waiting", "running", "done", "failed")


def bootstrap_share(
    facts: Mapping[str, Sequence[Fact]],
    hosts: Iterable[HostInfo],
    records: Iterable[BootstrapRecord],
    running: Mapping[str, Collection[str]],
) -> dict[str, dict[str, int]]:
    """Per provider, its created instances (``instanceCreated`` committed, not gone) by where the
    bootstrap is with them: ``running`` (in the play now: ``running`` names their keys per
    provider), ``done`` (joined at the controller, or the last play ended ok), ``failed`` (the last
    play failed it: due again after its backoff, or given up and being returned), else
    ``waiting`` (never tried, or its play was stopped)."""
    joined = {h.instance_key for h in hosts if h.instance_key and (h.joined_at > 0 or h.state in JOINED_STATES)}
    by_key = {r.key: r for r in records}
    out: dict[str, dict[str, int]] = {}
    for provider, provider_facts in sorted(facts.items()):
        counts = dict.fromkeys(BOOTSTRAP_STATES, 0)
        now_running = running.get(provider, ())
        for record in ledger(provider_facts).values():
            if record.gone or record.created is None:
                continue
            tried = by_key.get(record.key)
            if record.key in joined or (tried is not None and (tried.ok or tried.joined)):
                counts["done"] += 1
            elif record.key in now_running:
                counts["running"] += 1
            elif tried is not None and tried.outcome and not tried.outcome.startswith(STOPPED):
                counts["failed"] += 1
            else:
                counts["waiting"] += 1
        out[provider] = counts
    return out


# First-boot hosts by outcome, in the order a boot goes through them (docs/daemon.md, "Status file").
FIRST_BOOT_OUTCOMES = tuple(kind.value for kind in FirstBootKind)
FIRST_BOOT_HOST_ROWS = 50  # hosts not joined listed by name (the counts cover all)
FIRST_BOOT_FAILED_ROWS = 20  # failed first boots kept, the newest last


def first_boot_share(
    facts: Mapping[str, Sequence[Fact]],
    hosts: Iterable[HostInfo],
    records: Iterable[BootstrapRecord],
    config: Config | None,
    failed: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The ``first_boot`` member: per provider, its created first-boot instances (of a template
    with ``bootstrap.mode: first-boot``, or with a first-boot outcome recorded) by outcome
    (``joined`` when the controller matched it; a host never read yet is ``no-result``); the
    hosts not joined with their outcome line (at most :data:`FIRST_BOOT_HOST_ROWS`); and
    ``failed``, the last first boots that failed (returned, so no longer among the instances)."""
    joined = {h.instance_key for h in hosts if h.instance_key and (h.joined_at > 0 or h.state in JOINED_STATES)}
    by_key = {r.key: r for r in records}
    templates = config.templates if config is not None else {}
    counts: dict[str, dict[str, int]] = {}
    rows: list[dict[str, str]] = []
    for provider, provider_facts in sorted(facts.items()):
        row = dict.fromkeys(FIRST_BOOT_OUTCOMES, 0)
        for record in ledger(provider_facts).values():
            # A warm-pool instance waits stopped: it boots (and is counted) once a start takes it.
            if record.gone or record.created is None or record.in_pool:
                continue
            seen = by_key.get(record.key)
            template = templates.get(record.template)
            if not (seen is not None and seen.first_boot) and not (
                template is not None and template.bootstrap.mode == "first-boot"
            ):
                continue  # a pushed host: the bootstrap member counts it
            if record.key in joined or (seen is not None and seen.joined):
                row[FirstBootKind.JOINED.value] += 1
                continue
            outcome = seen.first_boot if seen is not None and seen.first_boot in row else FirstBootKind.NO_RESULT.value
            row[outcome] += 1
            line = seen.first_boot_line if seen is not None and seen.first_boot_line else "no result yet"
            name = seen.host_name if seen is not None else record.host_name
            rows.append({"provider": provider, "host": name, "key": record.key, "outcome": outcome, "line": line})
        if any(row.values()):
            counts[provider] = row
    return {
        "counts": counts,
        "hosts": rows[:FIRST_BOOT_HOST_ROWS],
        "failed": [dict(f) for f in failed][-FIRST_BOOT_FAILED_ROWS:],
    }


def recent_failures(before: Iterable[Mapping[str, Any]], now: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The failed first boots ``before`` and those of this pass ``now``, once each (by instance
    key: a status written twice for one pass adds nothing), the newest last."""
    rows: dict[str, dict[str, Any]] = {}
    for row in [*before, *now]:
        if isinstance(row, Mapping):
            key = str(row.get("key", ""))
            rows.pop(key, None)
            rows[key] = dict(row)
    return list(rows.values())[-FIRST_BOOT_FAILED_ROWS:]


def open_op_rows(facts: Mapping[str, Sequence[Fact]]) -> list[dict[str, Any]]:
    """Every provider's open ops (intent without outcome), oldest first per provider."""
    rows = []
    for provider in sorted(facts):
        for op in open_ops(facts[provider]):
            row = asdict(op)
            row["pending"] = list(op.pending)
            rows.append(row)
    return rows


def breaker_rows(breakers: Breakers, now: float) -> list[dict[str, Any]]:
    """Every recorded breaker's evidence at ``now`` (a template never tripped has no row: closed)."""
    return [state.evidence(now, breakers.settings) for state in breakers.states()]


# The reclaim reasons that are a named timeout passing (a ``closed`` host is returned for no timeout).
_RECLAIM_TIMEOUTS = {"idle": NamedTimeout.IDLE_TIME, "lifetime": NamedTimeout.MAX_LIFETIME}


def expired_timeouts(figures: PassFigures, facts: Mapping[str, Sequence[Fact]]) -> list[dict[str, str]]:
    """The named timeouts the pass acted on, one entry per host returned for one:
    ``join_deadline`` (the join-tracking phase's ``returned`` keys, their provider from the
    facts) and ``idle_time`` or ``max_lifetime`` (the reclaim phase's ``returned`` keys, by the
    reason of their reclaim candidate)."""
    out: list[dict[str, str]] = []
    if figures.unjoined:
        provider_of = {key: r.provider for records in facts.values() for key, r in ledger(records).items()}
        out += [
            {"provider": provider_of.get(key, ""), "timeout": NamedTimeout.JOIN_DEADLINE.value, "key": key}
            for key in figures.unjoined
        ]
    for key in figures.reclaimed:
        candidate = figures.candidates.get(key)
        timeout = _RECLAIM_TIMEOUTS.get(candidate.reason) if candidate is not None else None
        if candidate is not None and timeout is not None:
            out.append({"provider": candidate.provider, "timeout": timeout.value, "key": key})
    return out


def build_document(
    *,
    daemon: Mapping[str, Any],
    report: PassReport | Mapping[str, Any] | None,
    leases: Iterable[LeaseStatus],
    breakers: Breakers,
    facts: Mapping[str, Sequence[Fact]],
    hosts: Iterable[HostInfo],
    now: float,
    orphans: Mapping[str, Any] | None = None,
    store: Mapping[str, Any] | None = None,
    bootstrap_records: Iterable[BootstrapRecord] = (),
    bootstrapping: Mapping[str, Collection[str]] | None = None,
    config: Config | None = None,
    first_boot_failed: Sequence[Mapping[str, Any]] = (),
    refusals: RefusalMemory | None = None,
    notices: Sequence[Mapping[str, Any]] = (),
    selected: Selected = NOTHING_SELECTED,
) -> dict[str, Any]:
    """The status document (docs/daemon.md, "Status file"); ``daemon`` is its ``daemon`` member;
    ``report`` the last pass's (typed, or its ``last_pass`` document as written before);
    ``bootstrap_records`` and ``bootstrapping`` (the keys in a play now, per provider) make its
    ``bootstrap`` member; ``config`` its ``cost_per_hour`` member (empty without);
    ``first_boot_failed``: the failed first boots of the document before (its ``first_boot``
    member's ``failed``), to which this pass's are added; ``refusals`` its ``refusals`` member
    (the memory of refusals' records, held or still counting; empty without); ``notices`` the
    noticed hosts; ``selected`` the last pass's ``select:`` offerings (the ``spend`` prices with them)."""
    hosts = list(hosts)
    last = report.to_json() if isinstance(report, PassReport) else dict(report) if report is not None else None
    figures = PassFigures.of(report) if isinstance(report, PassReport) else PassFigures.from_json(last)
    return {
        "daemon": {**daemon, "written": now},
        "last_pass": last,
        "leases": lease_rows(leases),
        "breakers": breaker_rows(breakers, now),
        "refusals": [r.evidence() for r in refusals.records(now)] if refusals is not None else [],
        "reclaim_candidates": list((last or {}).get("reclaim_candidates", [])),
        "open_ops": open_op_rows(facts),
        "instances": instance_states(facts, hosts),
        "bootstrap": bootstrap_share(facts, hosts, bootstrap_records, bootstrapping or {}),
        "first_boot": first_boot_share(
            facts, hosts, bootstrap_records, config, recent_failures(first_boot_failed, figures.first_boot_failed)
        ),
        "cost_per_hour": cost_per_hour(facts, config) if config is not None else {},
        # Per provider, template and offering: instances and their cost per hour (docs/daemon.md).
        "offerings": offering_usage(config, facts) if config is not None else {},
        "pools": pool_sizes(facts, config) if config is not None else {},
        # Money spent since the daemon started and the rate now (reconcile/costs.py, docs/cost.md).
        "spend": spend_document(config, facts, float(daemon.get("started") or now), now, selected) if config else None,
        "timeouts_expired": expired_timeouts(figures, facts),
        # Per template, why the last pass launched what it did or nothing (reconcile/reasons.py).
        "reasons": dict((last or {}).get("reasons") or {}),
        # The orphan scans' timer and the last scan's summary (orchestrator/daemon/orphanscan.py).
        "orphans": dict(orphans) if orphans is not None else None,
        # With a shared store (terraform.backend: pg): reachable or since when not, the live
        # members and what each holds, this daemon's share (orchestrator/daemon/members.py).
        "store": dict(store) if store is not None else None,
        # Hosts acted on for an interruption notice (orchestrator/reconcile/noticebook.py).
        "notices": [dict(n) for n in notices],
    }


def update_metrics(
    metrics: DaemonMetrics,
    document: Mapping[str, Any],
    config: Config,
    pass_duration: float | None,
    figures: PassFigures | None = None,
) -> None:
    """Lease, instance, cost, budget, backoff, breaker, pass, phase and per-template metrics from
    a status document and the configuration in force.

    ``figures``: those of the typed report the document was made from (the daemon's, after a
    pass); without, they are read from the document's ``last_pass``.

    Every configured template gets an ``xceprov_breaker_open`` sample (0 when it has no row) and
    its demand, in-flight and gap samples; every provider of the document a sample for each
    instance state; ``pass_duration`` None: no pass ended (a status written after an orphan
    scan or at stop), the pass metrics stay and nothing is counted again.
    """
    templates = config.templates
    metrics.set_interval(config.daemon.reconcile_interval)
    metrics.set_budgets(
        config.cluster,
        config.policy.budget_per_hour,
        {name: provider.budget_per_hour for name, provider in config.providers.items()},
    )
    for row in document.get("leases", []):
        metrics.set_lease(str(row["provider"]), bool(row["held"]), float(row["remaining"]))
    for provider, counts in document.get("instances", {}).items():
        seeded = dict.fromkeys(INSTANCE_STATES, 0) | {str(k): int(v) for k, v in counts.items()}
        metrics.set_instances(str(provider), seeded)
    metrics.set_costs(
        {
            (str(provider), str(template)): float(cost)
            for provider, row in (document.get("cost_per_hour") or {}).items()
            for template, cost in row.items()
        }
    )
    metrics.set_pools(
        {
            (str(provider), str(template)): (int(row.get("stopped", 0)), int(row.get("target", 0)))
            for provider, by_template in (document.get("pools") or {}).items()
            for template, row in by_template.items()
        }
    )
    for provider, counts in (document.get("bootstrap") or {}).items():
        metrics.set_bootstrap(str(provider), {str(k): int(v) for k, v in counts.items()})
    for provider in document.get("instances", {}):  # every provider's outcomes named, 0 when none
        counts = ((document.get("first_boot") or {}).get("counts") or {}).get(provider, {})
        metrics.set_first_boot(str(provider), {k: int(counts.get(k, 0)) for k in FIRST_BOOT_OUTCOMES})
    open_templates = {
        str(row["template"]) for row in document.get("breakers", []) if row.get("position") == Position.OPEN.value
    }
    for template in sorted(set(templates) | open_templates):
        metrics.set_breaker(template, template in open_templates)
    last = figures if figures is not None else PassFigures.from_json(document.get("last_pass"))
    if last.blocked is not None:
        providers = document.get("instances", {})
        metrics.set_backoff([(str(p), "*") for p in providers], last.blocked)
    written = (document.get("daemon") or {}).get("written")
    metrics.spend.update(document.get("spend"))
    metrics.refusals.set_held(document.get("refusals") or [], float(written) if written is not None else 0.0)
    if pass_duration is not None and last.finished is not None:
        metrics.pass_finished(last.finished, pass_duration)
        metrics.refusals.count(last.refused)
        for item in document.get("timeouts_expired", []):  # counted once: for the pass that acted
            metrics.timeout_passed(str(item["provider"]), NamedTimeout(item["timeout"]))
        for failure in last.first_boot_failed:
            metrics.first_boot_failed(str(failure.get("provider", "")), str(failure.get("step", "")))
        metrics.phases_ran((p.name, p.failed) for p in last.phases)
        for template, found in (document.get("reasons") or {}).items():  # counted once per pass
            for reason in found:
                metrics.reason_seen(str(template), str(reason.get("code", "")))
        if last.read_ok:  # a failed read knows no demand: the last stays
            metrics.set_templates(template_rows(last.templates, templates))


def template_rows(rows: Mapping[str, TemplateRow], templates: Iterable[str]) -> dict[str, tuple[int, int, int]]:
    """``(demand, in flight, gap)`` per template from a pass's template rows; in flight is every
    host on its way (the controller's in flight, the awaited and the unreflected ones), so that
    the gap is the demand minus it; a configured template the pass did not name is 0s."""
    out = dict.fromkeys(templates, (0, 0, 0))
    for template, row in rows.items():
        out[template] = (row.wanted, row.supply, row.gap)
    return out
