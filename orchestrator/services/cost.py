"""``xceprov cost``: what bursting cost in a period, from the controller's facts (docs/cost.md).

Asks the controller for every provider's facts (as ``status`` does) and derives each
instance's cost (``reconcile/costs.py``); nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.configfile import LoadedConfig
from orchestrator.model.catalogue import select_pairs
from orchestrator.model.config import Config
from orchestrator.model.costs import CostItem, totals
from orchestrator.model.text import printable
from orchestrator.ops.catalogue import catalogue_reader
from orchestrator.ops.facts import standalone_facts
from orchestrator.reconcile.costs import cost_items
from orchestrator.reconcile.offers import Selected
from orchestrator.reconcile.orphancosts import Unowned, orphan_costs
from orchestrator.services.status import status_instance_id


@dataclass(frozen=True)
class CostReport:
    """The items of a period and their totals by one dimension; ``unowned``: the reported
    orphans, apart (``reconcile/orphancosts.py``)."""

    since: float
    until: float
    by: str
    items: list[CostItem]
    unowned: list[Unowned] = field(default_factory=list)

    @property
    def total(self) -> float:
        """Money spent in the period (each instance once)."""
        return sum(item.cost for item in self.items)

    def to_json(self) -> dict[str, object]:
        """``xceprov cost --json``."""
        return {
            "since": self.since,
            "until": self.until,
            "total": round(self.total, 6),
            "by": self.by,
            "totals": {name: round(cost, 6) for name, cost in totals(self.items, self.by).items()},
            # An instance of a template in several host groups counts whole under each.
            "groups_overlap": self.by == "group",
            "instances": [item.to_json() for item in self.items],
            # Reported orphans: not ours, not in the total; what each would cost if it still runs.
            "unowned": [u.to_json() for u in self.unowned],
        }

    def text(self) -> str:
        """``xceprov cost``: the totals by the chosen dimension, then the total."""
        rows = totals(self.items, self.by)
        width = max([len(self.by), *(len(name) for name in rows)])
        lines = [f"{self.by.upper():<{width}}  COST"]
        lines += [f"{name:<{width}}  {cost:.6f}" for name, cost in rows.items()]
        lines.append(f"total {self.total:.6f} over {len(self.items)} instance(s)")
        if self.by == "group":
            lines.append("(an instance of a template in several host groups counts under each)")
        if self.unowned:
            known = [u.estimated_cost for u in self.unowned if u.estimated_cost is not None]
            lines.append(
                f"unowned: {len(self.unowned)} reported orphan(s), not in the total,"
                f" {sum(known):.6f} if still running ({len(self.unowned) - len(known)} without an estimate)"
            )
        return "\n".join(printable(line) for line in lines)


def selections(config: Config) -> Selected:
    """The offerings of every ``select:`` template, from the providers' catalogues (the kept
    file while fresh, else one Terraform run per provider, as ``xceprov plan`` reads them), so
    an instance of one is priced at its selected offering's price; nothing read without one."""
    if not select_pairs(config):
        return {}
    return catalogue_reader(config).selections().selected


def cost_report(loaded: LoadedConfig, since: float, until: float, by: str) -> CostReport:
    """The costs of ``[since, until)`` from the controller's facts (``ControllerError`` when
    no controller answers)."""
    config = loaded.config
    if config.standalone:  # no controller: the standalone journal holds the facts (ops/facts.py)
        journal = standalone_facts(config)
        facts = {p: journal.facts(p) for p in sorted(config.providers)}
    else:
        link = ControllerLink(config.controller, instance_id=status_instance_id(config.cluster), cluster=config.cluster)
        try:
            link.open()
            facts = {p: link.query_facts(p) for p in sorted(config.providers)}
        finally:
            link.close()
    adopted, unowned = orphan_costs(config, facts, since, until)
    items = sorted(
        [*cost_items(config, facts, since, until, selections(config)), *adopted], key=lambda i: (i.start, i.key)
    )
    return CostReport(since, until, by, items, unowned)
