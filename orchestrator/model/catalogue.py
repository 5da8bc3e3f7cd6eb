"""A provider's flavor catalogue as values, and the offerings a template's ``select:`` picks from it.

Every catalogue root (``terraform/catalogue/<module>``) outputs ``flavors``: a list of
``{name, cpus, memory_gb, gpus, cost_per_hour (null: no price), zones}``. That output is the
cloud's (or a site's module's) word: :func:`flavors_of` reads it as untrusted input, refusing
the whole of it, one line naming the entry and the field, when a value has the wrong type, is
out of bounds or not finite.

:func:`select_offerings` is the ``select:`` of docs/configuration.md ("Selecting flavors from
the catalogue"): every range inclusive, a flavor priced by the catalogue else by
``cost_per_cpu_hour`` times its cpus (neither: refused, naming the flavor), ``max_cost_per_hour``
dropping the dearer, ``zones`` giving one offering per flavor and zone it is offered in, the
slots of the template or the flavor's cpus, cheapest per slot first and the ``limit`` cheapest
flavors kept.

Data only: no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from orchestrator.model.config import Config
from orchestrator.model.offerings import Offering, by_cost, offering_name, valid_name
from orchestrator.model.templateconfig import CountRange, FlavorSelection

# A flavor's or zone's name: what an offering's name can be made of, without ``@`` (the offering
# is ``flavor@zone``).
_NAME: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
# Bounds far above any cloud's (EC2's largest: 448 vCPUs, 24 TiB, 16 GPUs), far below nonsense.
MAX_FLAVORS: Final = 5000
MAX_CPUS: Final = 4096
MAX_MEMORY_GB: Final = 1_000_000.0
MAX_GPUS: Final = 256
MAX_COST: Final = 1_000_000.0
MAX_ZONES: Final = 64


class CatalogueError(ValueError):
    """A catalogue that cannot be used, or a selection that cannot be priced (one line)."""


@dataclass(frozen=True)
class Flavor:
    """One flavor of a provider's catalogue."""

    name: str
    cpus: int
    memory_gb: float
    gpus: int = 0
    cost_per_hour: float | None = None
    zones: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        """JSON-ready (the shape of the catalogue roots' ``flavors`` output)."""
        return {
            "name": self.name,
            "cpus": self.cpus,
            "memory_gb": self.memory_gb,
            "gpus": self.gpus,
            "cost_per_hour": self.cost_per_hour,
            "zones": list(self.zones),
        }


def flavors_of(value: Any) -> list[Flavor]:
    """The ``flavors`` output of a catalogue root as values; ``CatalogueError`` (one line) when
    any entry is malformed, so a partly wrong catalogue is never half used."""
    if not isinstance(value, list):
        raise CatalogueError(f"flavors: expected a list, got {_kind(value)}")
    if len(value) > MAX_FLAVORS:
        raise CatalogueError(f"flavors: {len(value)} entries, at most {MAX_FLAVORS}")
    found: list[Flavor] = []
    seen: set[str] = set()
    for index, entry in enumerate(value):
        flavor = _flavor(index, entry)
        if flavor.name in seen:
            raise CatalogueError(f"flavors[{index}].name: {flavor.name!r} listed twice")
        seen.add(flavor.name)
        found.append(flavor)
    return found


def _flavor(index: int, entry: Any) -> Flavor:
    where = f"flavors[{index}]"
    if not isinstance(entry, dict):
        raise CatalogueError(f"{where}: expected an object, got {_kind(entry)}")
    name = entry.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise CatalogueError(f"{where}.name: {_shown(name)} is not a flavor name ({_NAME.pattern})")
    where = f"{where} ({name})"
    cpus = _whole(entry.get("cpus"), f"{where}.cpus", 1, MAX_CPUS)
    memory = _number(entry.get("memory_gb"), f"{where}.memory_gb", MAX_MEMORY_GB)
    if memory <= 0:
        raise CatalogueError(f"{where}.memory_gb: {memory:g} must be above 0")
    gpus = _whole(entry.get("gpus", 0), f"{where}.gpus", 0, MAX_GPUS)
    raw_cost = entry.get("cost_per_hour")
    cost = None if raw_cost is None else _number(raw_cost, f"{where}.cost_per_hour", MAX_COST)
    zones = entry.get("zones") or []
    if not isinstance(zones, list) or len(zones) > MAX_ZONES:
        raise CatalogueError(f"{where}.zones: expected a list of at most {MAX_ZONES} zone names")
    for zone in zones:
        if not isinstance(zone, str) or not _NAME.match(zone):
            raise CatalogueError(f"{where}.zones: {_shown(zone)} is not a zone name ({_NAME.pattern})")
    return Flavor(name, cpus, memory, gpus, cost, tuple(dict.fromkeys(zones)))


def _number(value: Any, where: str, most: float) -> float:
    # bool is an int in Python, never a number in a catalogue.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CatalogueError(f"{where}: expected a number, got {_kind(value)}")
    number = float(value)
    if not math.isfinite(number) or not 0 <= number <= most:
        raise CatalogueError(f"{where}: {_shown(value)} must be a finite number from 0 to {most:g}")
    return number


def _whole(value: Any, where: str, least: int, most: int) -> int:
    number = _number(value, where, most)
    if number != int(number) or number < least:
        raise CatalogueError(f"{where}: {_shown(value)} must be a whole number from {least} to {most}")
    return int(number)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _shown(value: Any) -> str:
    # A hostile value (huge, control characters) stays one short line.
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _within(value: float, bounds: CountRange | None) -> bool:
    if bounds is None:
        return True
    return (bounds.min is None or value >= bounds.min) and (bounds.max is None or value <= bounds.max)


def matches(selection: FlavorSelection, flavor: Flavor) -> bool:
    """Whether ``flavor``'s cpus, memory and gpus fall in the selection's ranges (inclusive)."""
    return (
        _within(flavor.cpus, selection.cpus)
        and _within(flavor.memory_gb, selection.memory_gb)
        and _within(flavor.gpus, selection.gpus)
    )


def price_of(selection: FlavorSelection, flavor: Flavor) -> float:
    """What ``flavor`` costs per hour: the catalogue's price, else ``cost_per_cpu_hour`` times its
    cpus; ``CatalogueError`` naming the flavor when there is neither."""
    if flavor.cost_per_hour is not None:
        return flavor.cost_per_hour
    if selection.cost_per_cpu_hour is not None:
        return round(selection.cost_per_cpu_hour * flavor.cpus, 6)
    raise CatalogueError(
        f"flavor {flavor.name} matches but the catalogue gives no price for it: set select.cost_per_cpu_hour"
    )


def select_offerings(selection: FlavorSelection, flavors: Sequence[Flavor], template_slots: int) -> list[Offering]:
    """The offerings ``selection`` picks from ``flavors`` (source ``catalogue``), cheapest per slot
    first (ties: catalogue order, then the order of ``selection.zones``); the offerings of the
    ``limit`` cheapest flavors. None when nothing matches."""
    picked: list[Offering] = []
    for flavor in flavors:
        if not matches(selection, flavor):
            continue
        cost = price_of(selection, flavor)
        if selection.max_cost_per_hour is not None and cost > selection.max_cost_per_hour:
            continue
        slots = flavor.cpus if selection.slots == "cpus" else template_slots
        if selection.zones:
            zones: list[str | None] = [z for z in selection.zones if z in flavor.zones]
        else:
            zones = [None]
        for zone in zones:
            name = offering_name(flavor.name, zone)
            if not valid_name(name):
                raise CatalogueError(f"offering {name!r} of flavor {flavor.name}: name too long for an offering")
            picked.append(Offering(name, flavor.name, zone, None, cost, slots, "catalogue"))
    ordered = by_cost(picked)
    kept: list[str] = []
    for offering in ordered:
        if offering.flavor not in kept and len(kept) < selection.limit:
            kept.append(offering.flavor)
    return [o for o in ordered if o.flavor in kept]


@dataclass(frozen=True)
class Selections:
    """The offerings of every ``select:`` template on each of its providers, and why a pair has none.

    ``selected``: (template, provider) -> its offerings in the policy's order (what
    ``PolicyInputs.selected`` takes); ``problems``: (template, provider) -> one line, for a pair
    whose catalogue could not be read or whose selection could not be priced (its list is empty).
    """

    selected: Mapping[tuple[str, str], list[Offering]]
    problems: Mapping[tuple[str, str], str]


def select_pairs(config: Config) -> list[tuple[str, str]]:
    """Every (template, provider) whose provider block has ``select:``, in configuration order."""
    return [
        (tname, pname)
        for tname, template in config.templates.items()
        for pname, side in template.providers.items()
        if side.select is not None
    ]


def resolve_selections(
    config: Config, catalogues: Mapping[str, Sequence[Flavor]], unread: Mapping[str, str] | None = None
) -> Selections:
    """The offerings every ``select:`` picks from its provider's catalogue (``catalogues``: provider
    -> flavors; ``unread``: provider -> why its catalogue is missing)."""
    selected: dict[tuple[str, str], list[Offering]] = {}
    problems: dict[tuple[str, str], str] = {}
    for tname, pname in select_pairs(config):
        template = config.templates[tname]
        selection = template.providers[pname].select
        assert selection is not None  # select_pairs
        selected[(tname, pname)] = []
        if pname not in catalogues:
            why = (unread or {}).get(pname, "not read")
            problems[(tname, pname)] = f"the catalogue of provider {pname} is unavailable: {why}"
            continue
        try:
            selected[(tname, pname)] = select_offerings(selection, catalogues[pname], template.xce.slots)
        except CatalogueError as exc:
            problems[(tname, pname)] = str(exc)
    return Selections(selected, problems)


def resolve_selected(
    config: Config, catalogues: Mapping[str, Sequence[Flavor]]
) -> dict[tuple[str, str], list[Offering]]:
    """(template, provider) -> the offerings its ``select:`` picks (empty when none can be)."""
    return dict(resolve_selections(config, catalogues).selected)
