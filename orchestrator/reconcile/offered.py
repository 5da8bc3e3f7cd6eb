"""The instances of each template and provider per offering, with their cost per hour, from the
facts (``xceprov status``, the daemon's status file).

An instance counts while the budgets count it (``InstanceRecord.counted``: live, in flight, or of
an op whose outcome is unknown), on the offering its op placed it on
(the ledger's ``offering``), at that offering's price (the budget's
:func:`~orchestrator.reconcile.budget.unit_cost`, so status and budget count alike); a warm-pool
instance waiting stopped counts under its offering at the template's ``stopped_cost_per_hour``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.model.config import Config
from orchestrator.model.facts import Fact
from orchestrator.reconcile.budget import unit_cost
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.offers import default_names

# provider → template → offering → {"instances": n, "cost_per_hour": c}
OfferingUsage = dict[str, dict[str, dict[str, dict[str, float]]]]


def offering_usage(config: Config, facts: Mapping[str, Sequence[Fact]]) -> OfferingUsage:
    """Per provider, template and offering: the instances counted and what they cost per hour."""
    defaults = default_names(config)
    out: OfferingUsage = {}
    for provider, provider_facts in sorted(facts.items()):
        for record in ledger(provider_facts, defaults).values():
            if not record.counted:
                continue
            cost = unit_cost(config, provider, record.template, stopped=record.in_pool, offering=record.offering)
            row = out.setdefault(provider, {}).setdefault(record.template, {})
            used = row.setdefault(record.offering, {"instances": 0, "cost_per_hour": 0.0})
            used["instances"] += 1
            used["cost_per_hour"] = round(used["cost_per_hour"] + cost, 6)
    return out
