"""The offerings of a template on a provider as the policy asks them, and what holds one back.

A template's provider block names one ``flavor:``, lists ``offerings:`` or ``select:``s flavors
from the provider's catalogue (docs/configuration.md, "Offerings"). :func:`offerings_for` gives
them in the policy's order (:func:`~orchestrator.model.offerings.by_cost`: lowest cost per slot,
then the configured order). A ``select:`` template's offerings come from the catalogue, read
elsewhere and handed in as ``selected`` ((template, provider) → offerings); one not resolved
(yet) has none, and its provider is passed over with ``no-offering``.

What holds an offering back is asked through :class:`OfferingHolds` (the memory of refusals,
``reconcile/refusals.py``): capacity per (provider, placement), where the placement is
:func:`placement_key` (``flavor[@zone][@subnet]``, whatever the offering's own name: two
templates on the same flavor and zone share the cloud's capacity), and quota per provider.

No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final, Protocol

from orchestrator.model.config import Config
from orchestrator.model.offerings import Offering, Placement, by_cost, default_offering, offering_name

# (template, provider) → the offerings a ``select:`` resolved from the provider's catalogue.
Selected = Mapping[tuple[str, str], Sequence[Offering]]
NOTHING_SELECTED: Final[Selected] = MappingProxyType({})


class OfferingHolds(Protocol):
    """What the memory of refusals holds back now (``until``: unix seconds; None: nothing)."""

    def capacity(self, provider: str, placement: str, now: float) -> float | None:
        """Until when ``placement`` (:func:`placement_key`) on ``provider`` is in capacity backoff."""
        ...

    def quota(self, provider: str, now: float) -> float | None:
        """Until when every offering of ``provider`` is held for quota."""
        ...


class NoHolds:
    """Holds nothing: every offering may be asked (no memory of refusals wired)."""

    def capacity(self, provider: str, placement: str, now: float) -> float | None:
        """Nothing held."""
        return None

    def quota(self, provider: str, now: float) -> float | None:
        """Nothing held."""
        return None


def placement_key(offering: Offering) -> str:
    """The name the cloud's capacity is known by: ``flavor[@zone][@subnet]``."""
    return offering_name(offering.flavor, offering.zone, offering.subnet)


def configured(config: Config, template: str, provider: str, selected: Selected = NOTHING_SELECTED) -> list[Offering]:
    """The offerings of ``template`` on ``provider`` in configured (or catalogue) order; none
    when either is not configured or a ``select:`` is not resolved."""
    on = config.templates.get(template)
    side = on.providers.get(provider) if on is not None else None
    if on is None or side is None:
        return []
    if side.select is not None:
        return list(selected.get((template, provider), ()))
    return side.listed_offerings(on.xce.slots)


def offerings_for(
    config: Config, template: str, provider: str, selected: Selected = NOTHING_SELECTED
) -> list[Offering]:
    """The offerings of ``template`` on ``provider`` in the order the policy asks them."""
    return by_cost(configured(config, template, provider, selected))


def default_for(config: Config, template: str, provider: str, selected: Selected = NOTHING_SELECTED) -> Offering | None:
    """The offering of keys whose intent names none (the first configured); None when there is
    none (not configured, or a ``select:`` not resolved)."""
    found = configured(config, template, provider, selected)
    return default_offering(found) if found else None


def offering_of(
    config: Config, template: str, provider: str, name: str, selected: Selected = NOTHING_SELECTED
) -> Offering | None:
    """The offering named ``name`` of ``template`` on ``provider``; the default offering when no
    longer configured (an instance of an offering since removed); None when there is none."""
    found = configured(config, template, provider, selected)
    named = next((o for o in found if o.name == name), None)
    return named or (default_offering(found) if found else None)


def default_names(config: Config, selected: Selected = NOTHING_SELECTED) -> dict[tuple[str, str], str]:
    """(provider, template) → the name of its default offering, for every pair that has one."""
    out: dict[tuple[str, str], str] = {}
    for template, on in config.templates.items():
        for provider in on.providers:
            found = default_for(config, template, provider, selected)
            if found is not None:
                out[(provider, template)] = found.name
    return out


def placed_keys(
    config: Config, template: str, provider: str, placements: Sequence[Placement], selected: Selected = NOTHING_SELECTED
) -> set[tuple[str, str]]:
    """(provider, placement key) of every offering ``placements`` name (none: the default
    offering): what a refused op of them refused."""
    names = [p.offering for p in placements] or [""]
    found = (offering_of(config, template, provider, name, selected) for name in names)
    return {(provider, placement_key(o)) for o in found if o is not None}
