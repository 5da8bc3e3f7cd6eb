"""Orphans in the cost ledger: instances no create op of ours made (docs/cost.md, "Orphans").

* An **adopted** orphan (an ``orphanAdopted`` fact: it matched a live host, and the cluster
  uses it) is counted like our own instances, as an item of op ``orphan:<cloud id>``: from the
  launch time the orphan scan listed (the fact's ``detail`` ``launch_time``; the fact's commit
  time when it carries none) at its template's default offering's price (the listing names no
  offering; the template is its ``xce:template`` tag, 0 when not configured), until a
  ``returned`` or ``lost`` fact names its cloud id; no path writes one today, so it counts as
  live up to the end of the period.
* A **reported** orphan (``orphanReported`` and never adopted) is not ours: it is left out of
  the items and totals and listed apart (``unowned``) with what it would have cost from its
  listed launch time to the end of the period if it still runs (None when the listing gave no
  launch time or its template has no price here): the facts do not say when it went.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.model.config import Config
from orchestrator.model.costs import CostItem, Stretch, item_of, launch_time_of
from orchestrator.model.facts import GONE_KINDS, Fact, FactKind
from orchestrator.reconcile.budget import groups_of, unit_cost

# The op of an adopted orphan's item: this prefix and its cloud id.
ORPHAN_OP = "orphan:"


@dataclass(frozen=True)
class Unowned:
    """A reported orphan: what it would cost in the period if it still runs (None: unknown)."""

    provider: str
    instance_id: str
    template: str
    launched: float | None
    reported: float
    estimated_cost: float | None

    def to_json(self) -> dict[str, object]:
        """``xceprov cost --json``'s ``unowned``."""
        cost = None if self.estimated_cost is None else round(self.estimated_cost, 6)
        return {
            "provider": self.provider,
            "instance_id": self.instance_id,
            "template": self.template,
            "launched": self.launched,
            "reported": self.reported,
            "estimated_cost": cost,
        }


def _priced(config: Config, provider: str, template: str) -> bool:
    on = config.templates.get(template)
    return on is not None and provider in on.providers


def orphan_costs(
    config: Config, facts: Mapping[str, Sequence[Fact]], since: float, until: float
) -> tuple[list[CostItem], list[Unowned]]:
    """The items of adopted orphans and the reported ones apart, each in launch order."""
    items: list[CostItem] = []
    unowned: list[Unowned] = []
    for provider, provider_facts in facts.items():
        adopted: dict[str, Fact] = {}
        reported: dict[str, Fact] = {}
        gone: dict[str, float] = {}
        for fact in sorted(provider_facts, key=lambda f: (f.fact_id, f.committed)):
            if fact.kind == FactKind.ORPHAN_ADOPTED and fact.instance_id:
                adopted.setdefault(fact.instance_id, fact)
            elif fact.kind == FactKind.ORPHAN_REPORTED and fact.instance_id:
                reported.setdefault(fact.instance_id, fact)
            elif fact.kind in GONE_KINDS and fact.instance_id:
                gone.setdefault(fact.instance_id, fact.committed)
        for cloud_id, fact in adopted.items():
            start = launch_time_of(fact.detail) or fact.committed
            end = gone.get(cloud_id)
            if start >= until or (end is not None and end <= since):
                continue
            price = unit_cost(config, provider, fact.template)
            identity = {
                "key": cloud_id,
                "op_id": ORPHAN_OP + cloud_id,
                "provider": provider,
                "template": fact.template,
                "offering": "",
                "groups": groups_of(config, fact.template),
                "instance_id": cloud_id,
            }
            stretch = Stretch(start, until if end is None else end, price)
            items.append(item_of(identity, [stretch], since, until, end))
        for cloud_id, fact in reported.items():
            if cloud_id in adopted or cloud_id in gone:
                continue
            launched = launch_time_of(fact.detail)
            estimate = None
            if launched is not None and _priced(config, provider, fact.template):
                seconds = max(0.0, until - max(launched, since))
                estimate = seconds * unit_cost(config, provider, fact.template) / 3600.0
            unowned.append(Unowned(provider, cloud_id, fact.template, launched, fact.committed, estimate))
    items.sort(key=lambda i: (i.start, i.key))
    unowned.sort(key=lambda u: (u.launched or u.reported, u.instance_id))
    return items, unowned
