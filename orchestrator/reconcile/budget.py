"""Room for new instances: ``max_instances`` and the budgets per hour, counted from the facts.

Spend is ``Σ cost_per_hour`` over every instance key of this orchestrator's create ops that is
not gone (``returned`` or ``lost``): live, in flight, or of an op whose outcome is unknown (a
create that failed midway may have launched it). So a retry never pushes spend over a budget:
a retry of an op re-applies keys already counted, and a new op after a failure gets room only
once the failed keys were recorded gone. A key of a template or provider no longer in the
configuration is costed at 0 and still takes room under ``max_instances``. A warm-pool
instance waiting stopped is costed at its template's ``stopped_cost_per_hour`` (its disk only)
and takes room under ``max_instances`` like any other; starting it adds the difference
(:func:`start_room`).

A running instance costs its offering's ``cost_per_hour`` (the one its op placed it on, the
ledger's ``offering``), or its default offering's when that offering is no longer configured;
a new op's room is counted at the cost of the offering it goes to (:func:`room`'s ``offering``).

A host group's budget per month (``per_month``, docs/cost.md) holds when what the group spent
this calendar month (UTC; ``Usage.month``, from the ledger) plus an hour of its spend per hour
(live, in-flight and new instances; less than an hour when the month ends sooner) stays
within it: launches stop an hour's money before the month's money is spent. Not "as if every
instance ran to the month's end": that would be a cap per hour in disguise (a budget of 5000
a month at 1 per hour would allow 7 instances on the 1st), useless for bursting; instances
running when the cap is reached go on until returned, and what they cost then passes it (a
``per_hour`` budget bounds that). Without ``Usage.month`` (a caller that read no facts) it is
not checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.model.config import Config
from orchestrator.model.costs import MonthSpend
from orchestrator.model.offerings import Offering
from orchestrator.reconcile.ledger import InstanceRecord
from orchestrator.reconcile.offers import NOTHING_SELECTED, Selected, offering_of


@dataclass
class Usage:
    """Counted instances and spend per provider, per (provider, template) and for the cluster."""

    instances: dict[str, int] = field(default_factory=dict)
    by_template: dict[tuple[str, str], int] = field(default_factory=dict)
    spend: dict[str, float] = field(default_factory=dict)
    # Spend per hour per host group (an instance counts whole under each group of its template).
    by_group: dict[str, float] = field(default_factory=dict)
    # What each group spent this calendar month so far (the budgets per month); None: not read.
    month: MonthSpend | None = None

    @classmethod
    def of(
        cls,
        config: Config,
        records: Iterable[InstanceRecord],
        selected: Selected = NOTHING_SELECTED,
        month: MonthSpend | None = None,
    ) -> Usage:
        """The usage of every counted (not gone) instance, each at its offering's price."""
        usage = cls(month=month)
        for record in records:
            if record.counted:
                stopped, offering = record.in_pool, record.offering
                cost = unit_cost(
                    config, record.provider, record.template, stopped=stopped, offering=offering, selected=selected
                )
                usage.add(config, record.provider, record.template, 1, cost=cost)
        return usage

    def add(
        self,
        config: Config,
        provider: str,
        template: str,
        count: int,
        *,
        stopped: bool = False,
        cost: float | None = None,
    ) -> None:
        """Count ``count`` more instances of ``template`` on ``provider`` (a decided op) at
        ``cost`` each (unset: the default offering's price); ``stopped``: warm-pool instances,
        at their stopped price."""
        self.instances[provider] = self.instances.get(provider, 0) + count
        self.by_template[(provider, template)] = self.by_template.get((provider, template), 0) + count
        if cost is None:
            cost = unit_cost(config, provider, template, stopped=stopped)
        self.spend[provider] = self.spend.get(provider, 0.0) + count * cost
        self._add_groups(config, template, count * cost)

    def _add_groups(self, config: Config, template: str, money: float) -> None:
        for group in groups_of(config, template):
            self.by_group[group] = self.by_group.get(group, 0.0) + money

    def copy(self) -> Usage:
        """An independent copy (a decision tried before it is kept)."""
        return Usage(dict(self.instances), dict(self.by_template), dict(self.spend), dict(self.by_group), self.month)

    def start(self, config: Config, provider: str, template: str, count: int) -> None:
        """``count`` pool instances started: each now costs its running price (room unchanged)."""
        extra = unit_cost(config, provider, template) - unit_cost(config, provider, template, stopped=True)
        self.spend[provider] = self.spend.get(provider, 0.0) + count * extra
        self._add_groups(config, template, count * extra)

    @property
    def total_spend(self) -> float:
        """Spend per hour of the whole cluster."""
        return sum(self.spend.values())


def groups_of(config: Config, template: str) -> tuple[str, ...]:
    """The host groups of ``template`` (``xce.host_groups``; none when it is not configured)."""
    on = config.templates.get(template)
    return tuple(on.xce.host_groups) if on is not None else ()


# The limits of host group budgets (``Room.limit``).
GROUP_LIMITS = ("group budget", "group month budget")


def _group_limits(config: Config, usage: Usage, template: str, cost: float) -> list[tuple[int, str, str]]:
    """(fits, "group budget" | "group month budget", group) for each budget of each host group
    of ``template``."""
    out = []
    month = usage.month
    for group in groups_of(config, template):
        budget = config.policy.group_budgets.get(group)
        if budget is None:
            continue
        rate = usage.by_group.get(group, 0.0)
        if budget.per_hour is not None:
            out.append((_affordable(budget.per_hour - rate, cost), "group budget", group))
        if budget.per_month is not None and month is not None:
            hours = month.lookahead
            left = budget.per_month - month.spent.get(group, 0.0) - rate * hours
            out.append((_affordable(left, cost * hours), "group month budget", group))
    return out


def _binding(groups: list[tuple[int, str, str]], limit: str) -> tuple[int, str, str] | None:
    """The group limit that binds when ``limit`` is one of them."""
    found = [g for g in groups if g[1] == limit]
    return min(found, key=lambda item: item[0]) if found else None


def _group_evidence(config: Config, usage: Usage, limit: tuple[int, str, str] | None) -> dict[str, Any]:
    if limit is None:
        return {}
    group = limit[2]
    budget = config.policy.group_budgets[group]
    out: dict[str, Any] = {
        "group": group,
        "group_spend": round(usage.by_group.get(group, 0.0), 6),
        "group_budget": budget.per_hour,
    }
    if usage.month is not None and budget.per_month is not None:
        out.update(
            group_month_spent=round(usage.month.spent.get(group, 0.0), 6),
            group_month_budget=budget.per_month,
            month_lookahead_hours=round(usage.month.lookahead, 3),
        )
    return out


@dataclass(frozen=True)
class Room:
    """How many more instances of a template fit on a provider, and which limit binds."""

    fits: int
    # "max_instances" | "template max_instances" | "provider budget" | "cluster budget" |
    # "group budget" | "group month budget" | ""
    limit: str
    evidence: dict[str, Any]


def unit_cost(
    config: Config,
    provider: str,
    template: str,
    *,
    stopped: bool = False,
    offering: str = "",
    selected: Selected = NOTHING_SELECTED,
) -> float:
    """``cost_per_hour`` of one instance of ``template`` on ``provider`` (0 when not configured)
    on the offering named ``offering`` (the default offering when "" or no longer configured;
    the template's ``cost_per_hour`` when it has none: a ``select:`` not resolved);
    ``stopped``: its ``stopped_cost_per_hour`` (a warm-pool instance)."""
    on = config.templates.get(template)
    side = on.providers.get(provider) if on is not None else None
    if side is None:
        return 0.0
    if stopped:
        return side.stopped_cost_per_hour
    found = offering_of(config, template, provider, offering, selected)
    return found.cost_per_hour if found is not None else side.cost_per_hour


def start_room(config: Config, usage: Usage, provider: str, template: str) -> Room:
    """How many pool instances of ``template`` on ``provider`` the budgets let start now: each adds
    its running price less its stopped price (``max_instances`` counted them already)."""
    extra = unit_cost(config, provider, template) - unit_cost(config, provider, template, stopped=True)
    limits: list[tuple[int, str]] = [(1 << 31, "")]
    budget = config.providers[provider].budget_per_hour
    if budget is not None:
        limits.append((_affordable(budget - usage.spend.get(provider, 0.0), extra), "provider budget"))
    if config.policy.budget_per_hour is not None:
        limits.append((_affordable(config.policy.budget_per_hour - usage.total_spend, extra), "cluster budget"))
    groups = _group_limits(config, usage, template, extra)
    limits += [(fits, limit) for fits, limit, _ in groups]
    fits, limit = min(limits, key=lambda item: item[0])
    binding = _binding(groups, limit)
    evidence = {"provider": provider, "template": template, "extra_cost_per_hour": extra, "fits": max(0, fits)}
    return Room(max(0, fits), limit, {**evidence, **_group_evidence(config, usage, binding), "limit": limit})


def room(
    config: Config,
    usage: Usage,
    provider: str,
    template: str,
    *,
    stopped: bool = False,
    offering: Offering | None = None,
) -> Room:
    """The most instances of ``template`` that ``provider`` can still take under every limit,
    each at ``offering``'s price (unset: the default offering's); ``stopped``: warm-pool
    instances, costed at their stopped price."""
    settings = config.providers[provider]
    if offering is not None and not stopped:
        cost = offering.cost_per_hour
    else:
        cost = unit_cost(config, provider, template, stopped=stopped)
    used = usage.instances.get(provider, 0)
    limits: list[tuple[int, str]] = [(settings.max_instances - used, "max_instances")]
    side = config.templates[template].providers.get(provider)
    if side is not None and side.max_instances is not None:
        limits.append((side.max_instances - usage.by_template.get((provider, template), 0), "template max_instances"))
    spend = usage.spend.get(provider, 0.0)
    if settings.budget_per_hour is not None:
        limits.append((_affordable(settings.budget_per_hour - spend, cost), "provider budget"))
    cluster_budget = config.policy.budget_per_hour
    if cluster_budget is not None:
        limits.append((_affordable(cluster_budget - usage.total_spend, cost), "cluster budget"))
    groups = _group_limits(config, usage, template, cost)
    limits += [(fits, limit) for fits, limit, _ in groups]
    fits, limit = min(limits, key=lambda item: item[0])
    binding = _binding(groups, limit)
    evidence = {
        "provider": provider,
        "template": template,
        "instances": used,
        "max_instances": settings.max_instances,
        "template_max_instances": side.max_instances if side is not None else None,
        "offering": offering.name if offering is not None else None,
        "cost_per_hour": cost,
        "provider_spend": round(spend, 6),
        "provider_budget": settings.budget_per_hour,
        "cluster_spend": round(usage.total_spend, 6),
        "cluster_budget": cluster_budget,
        **_group_evidence(config, usage, binding),
        "fits": max(0, fits),
        "limit": limit,
    }
    return Room(max(0, fits), limit, evidence)


def _affordable(left: float, cost: float) -> int:
    if cost <= 0:
        return 1 << 31  # free instances are bounded by max_instances only
    # A small tolerance: 3 × 0.1 must fit a budget of 0.3 despite binary fractions.
    return int((left + 1e-9) // cost)


def over_budget(config: Config, usage: Usage, provider: str) -> dict[str, Any] | None:
    """The budget ``usage`` already exceeds on ``provider`` or the cluster, with numbers; else None.

    Counted spend only goes above a budget when the budget was lowered (a reload) under
    instances already committed; an op of those instances is then not retried, since its
    retry would launch instances the new budget does not pay for.
    """
    budget = config.providers[provider].budget_per_hour if provider in config.providers else None
    spend = usage.spend.get(provider, 0.0)
    if budget is not None and spend > budget + 1e-9:
        return {"limit": "provider budget", "provider": provider, "spend": round(spend, 6), "budget": budget}
    cluster = config.policy.budget_per_hour
    if cluster is not None and usage.total_spend > cluster + 1e-9:
        return {"limit": "cluster budget", "spend": round(usage.total_spend, 6), "budget": cluster}
    return None
