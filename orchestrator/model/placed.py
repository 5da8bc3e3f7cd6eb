"""Which offering each instance is on, and what it costs there, from the facts.

A create intent's ``detail`` places its keys on offerings (:func:`~.offerings.placement_detail`,
in key order); a key whose intent names none (a warm-pool fill, an op made before offerings, a
provider-contract request) is on its template's default offering on the provider: the
``flavor:``, else the first listed (a ``select:`` template's default is the catalogue's, not known
here: ""). The instance's ``xce:offering`` tag in the cloud says the same.

No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from orchestrator.model.config import Config
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import instance_key
from orchestrator.model.offerings import Offering, offering_at, placements_of

# (provider, template) → the name of its default offering.
Defaults = Mapping[tuple[str, str], str]


def default_offerings(config: Config) -> dict[tuple[str, str], str]:
    """(provider, template) → the name of its default offering, for every pair that names one."""
    return {
        (provider, template): name
        for template, host in config.templates.items()
        for provider, side in host.providers.items()
        if (name := side.default_offering_name())
    }


def placed_offerings(facts: Iterable[Fact], defaults: Defaults) -> dict[str, str]:
    """Instance key → the offering its create intent placed it on (``defaults`` when it names none)."""
    out: dict[str, str] = {}
    for fact in facts:
        if fact.kind == FactKind.REQUEST_INTENT:
            placements = placements_of(fact.detail)
            default = defaults.get((fact.provider, fact.template), "")
            for index in range(fact.count):
                out[instance_key(fact.op_id, index)] = offering_at(placements, index, default)
    return out


def listed_offering(config: Config, provider: str, template: str, offering: str) -> Offering | None:
    """The offering named ``offering`` that ``template`` lists on ``provider`` (its ``flavor:`` or
    ``offerings:``); None when it lists none of that name (a ``select:`` one, one since removed)."""
    host = config.templates.get(template)
    side = host.providers.get(provider) if host is not None else None
    if host is None or side is None:
        return None
    return next((o for o in side.listed_offerings(host.xce.slots) if o.name == offering), None)


def offering_cost(config: Config, provider: str, template: str, offering: str) -> float:
    """``cost_per_hour`` of one running instance of ``template`` on ``provider`` on the offering
    named ``offering``: that offering's price, the template's ``cost_per_hour`` there when it
    lists none of that name; 0 when not configured."""
    named = listed_offering(config, provider, template, offering)
    if named is not None:
        return named.cost_per_hour
    host = config.templates.get(template)
    side = host.providers.get(provider) if host is not None else None
    return side.cost_per_hour if side is not None else 0.0
