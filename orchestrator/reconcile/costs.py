"""The cost ledger: each instance's cost, derived from the durable facts (docs/cost.md).

Derived, not stored: the controller keeps every fact of every op durably (and shares them with
every orchestrator of the cluster), so the facts are the ledger: an instance's start is its
``instanceCreated`` fact's launch time (the cloud's, ``model/costs.py``), its end the commit
time of its ``returned`` or ``lost`` fact, its price its offering's (``budget.unit_cost``, the
ledger's ``offering``). A second, written ledger would be a copy that could disagree with the
facts it was written from; deriving costs nothing extra to keep and is the same on every
orchestrator. The price is the configured one at the time of asking: a price changed in the
configuration reprices the past (the limit docs/cost.md states).

A warm-pool instance costs its template's ``stopped_cost_per_hour`` from its launch until a
start op's intent takes it, its running price after. A key with no ``instanceCreated`` fact
(in flight, or a create that reached nothing) is not counted: its launch time is unknown.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from orchestrator.model.config import Config
from orchestrator.model.costs import (
    CostItem,
    MonthSpend,
    Stretch,
    ended_time_of,
    item_of,
    launch_time_of,
    month_of,
)
from orchestrator.model.facts import GONE_KINDS, Fact, FactKind
from orchestrator.model.pool import start_keys
from orchestrator.reconcile.budget import unit_cost
from orchestrator.reconcile.ledger import InstanceRecord, ledger
from orchestrator.reconcile.offers import NOTHING_SELECTED, Selected, default_names


def _times(facts: Iterable[Fact]) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Per instance key: its launch, when it was gone, when a start op took it from a pool."""
    launched: dict[str, float] = {}
    gone: dict[str, float] = {}
    taken: dict[str, float] = {}
    for fact in sorted(facts, key=lambda f: (f.fact_id, f.committed)):
        key = fact.instance_key
        if fact.kind == FactKind.INSTANCE_CREATED and key:
            start = launch_time_of(fact.detail) or fact.committed
            if start:  # an old standalone journal's fact has neither: its start is unknown
                launched.setdefault(key, start)
        elif fact.kind in GONE_KINDS and key:
            # A loss the cloud dated (its listing's terminated_at) ends there, not when noticed.
            ended = ended_time_of(fact.detail) if fact.kind == FactKind.LOST else None
            gone.setdefault(key, ended if ended is not None and ended > 0 else fact.committed)
        elif fact.kind == FactKind.REQUEST_INTENT:
            for name in start_keys(fact.detail) or ():
                taken.setdefault(name, fact.committed)
    return launched, gone, taken


def _groups(config: Config, template: str) -> tuple[str, ...]:
    on = config.templates.get(template)
    return tuple(on.xce.host_groups) if on is not None else ()


def _stretches(
    config: Config, record: InstanceRecord, start: float, end: float, taken: float | None, selected: Selected
) -> list[Stretch]:
    price = unit_cost(config, record.provider, record.template, offering=record.offering, selected=selected)
    if not record.pool:
        return [Stretch(start, end, price)]
    stopped = unit_cost(config, record.provider, record.template, stopped=True)
    if taken is None or taken >= end:
        return [Stretch(start, end, stopped, stopped=True)]
    taken = max(taken, start)
    return [Stretch(start, taken, stopped, stopped=True), Stretch(taken, end, price)]


def cost_items(
    config: Config,
    facts: Mapping[str, Sequence[Fact]],
    since: float,
    until: float,
    selected: Selected = NOTHING_SELECTED,
) -> list[CostItem]:
    """Every instance of ``facts`` (provider → its facts) that cost something in ``[since,
    until)``, in launch order; a live one is counted up to ``until``."""
    defaults = default_names(config, selected)
    items: list[CostItem] = []
    for provider_facts in facts.values():
        launched, gone, taken = _times(provider_facts)
        for record in ledger(provider_facts, defaults).values():
            start = launched.get(record.key)
            if start is None:
                continue
            end = gone.get(record.key)
            if start >= until or (end is not None and end <= since):
                continue
            identity = {
                "key": record.key,
                "op_id": record.op_id,
                "provider": record.provider,
                "template": record.template,
                "offering": record.offering,
                "groups": _groups(config, record.template),
                "instance_id": record.instance_id,
            }
            stretches = _stretches(
                config, record, start, until if end is None else end, taken.get(record.key), selected
            )
            items.append(item_of(identity, stretches, since, until, end))
    return sorted(items, key=lambda i: (i.start, i.key))


def spend_rate(
    config: Config, facts: Mapping[str, Sequence[Fact]], selected: Selected = NOTHING_SELECTED
) -> dict[tuple[str, str], float]:
    """(provider, template) → money per hour of the instances live now (launched, not gone)."""
    out: dict[tuple[str, str], float] = {}
    defaults = default_names(config, selected)
    for provider_facts in facts.values():
        launched = _times(provider_facts)[0]
        for record in ledger(provider_facts, defaults).values():
            if record.gone or record.key not in launched:
                continue
            stopped = record.in_pool
            cost = unit_cost(
                config, record.provider, record.template, stopped=stopped, offering=record.offering, selected=selected
            )
            pair = (record.provider, record.template)
            out[pair] = out.get(pair, 0.0) + cost
    return out


def spend_since(
    config: Config, facts: Mapping[str, Sequence[Fact]], since: float, now: float, selected: Selected = NOTHING_SELECTED
) -> dict[tuple[str, str], float]:
    """(provider, template) → money spent in ``[since, now)`` (the daemon's ``spend``)."""
    out: dict[tuple[str, str], float] = {}
    for item in cost_items(config, facts, since, now, selected):
        pair = (item.provider, item.template)
        out[pair] = out.get(pair, 0.0) + item.cost
    return out


def spend_document(
    config: Config,
    facts: Mapping[str, Sequence[Fact]],
    since: float,
    now: float,
    selected: Selected = NOTHING_SELECTED,
) -> dict[str, object]:
    """The status document's ``spend``: money spent since the daemon started and the rate now,
    per provider and template (docs/daemon.md, "Metrics": ``xceprov_spend_total``); ``select:``
    instances at the offerings ``selected`` (the last pass's)."""

    def nested(values: Mapping[tuple[str, str], float]) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for (provider, template), value in sorted(values.items()):
            out.setdefault(provider, {})[template] = round(value, 6)
        return out

    return {
        "since": since,
        "total": nested(spend_since(config, facts, since, now, selected)),
        "rate_per_hour": nested(spend_rate(config, facts, selected)),
    }


def month_spend(
    config: Config, facts: Mapping[str, Sequence[Fact]], now: float, selected: Selected = NOTHING_SELECTED
) -> MonthSpend | None:
    """What each host group spent this calendar month (UTC) up to ``now``, from the ledger (an
    instance under each group of its template); None when no group has a budget per month."""
    if not any(b.per_month is not None for b in config.policy.group_budgets.values()):
        return None
    start, end = month_of(now)
    spent: dict[str, float] = {}
    for item in cost_items(config, facts, start, now, selected):
        for group in item.groups:
            spent[group] = spent.get(group, 0.0) + item.cost
    return MonthSpend(now, start, end, spent)
