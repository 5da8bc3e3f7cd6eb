"""Offerings: the several ways one template can be launched on one provider, as values.

A template's provider block names one flavor (``flavor:``, one offering named after it), lists
``offerings:`` (each a flavor, optionally a zone or a subnet, with its ``cost_per_hour`` and
``slots``), or selects flavors by attributes from the provider's catalogue (``select:``,
resolved where the catalogue is read). Every offering has a name unique within its template and
provider: given, or ``flavor``, ``flavor@zone``, ``flavor@subnet`` (``flavor@zone@subnet``).

The policy asks offerings with capacity in the order of :func:`by_cost`: lowest cost per slot,
then the configured order. One op may place its instances on several offerings: its
``requestIntent`` names them in ``detail`` (:func:`placement_detail`, in key order), so a resume
renders every key on the offering it was planned on. An intent without one (an op made before
offerings, a warm-pool fill) has every key on the provider's *default* offering
(:func:`default_offering`): the ``flavor:`` of a one-flavor template, else the first listed.

Data only: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

# What an offering's name may hold: it is a tag value (``xce:offering``), a metric label and part
# of a memory record's key.
OFFERING_NAME: Final = r"^[A-Za-z0-9][A-Za-z0-9._@:-]{0,63}$"
_NAME = re.compile(OFFERING_NAME)
# ``detail`` of a create op's ``requestIntent`` that places its keys on offerings.
_PLACEMENT_PREFIX: Final = "offerings "
# The most offerings one op places on: its detail stays far below the controller's 4096 bytes.
MAX_PLACEMENTS: Final = 32


@dataclass(frozen=True)
class Offering:
    """One flavor (optionally in one zone or subnet) a template can be launched as, with its price."""

    name: str
    flavor: str
    zone: str | None = None
    subnet: str | None = None
    cost_per_hour: float = 0.0
    slots: int = 1
    # Where it came from: "flavor" (the one flavor), "listed" (offerings:) or "catalogue" (select:).
    source: str = "listed"

    @property
    def cost_per_slot(self) -> float:
        """What one slot of it costs per hour (the policy's first order)."""
        return self.cost_per_hour / max(self.slots, 1)

    def evidence(self) -> dict[str, object]:
        """JSON-ready."""
        return {
            "offering": self.name,
            "flavor": self.flavor,
            "zone": self.zone,
            "subnet": self.subnet,
            "cost_per_hour": self.cost_per_hour,
            "slots": self.slots,
            "cost_per_slot": round(self.cost_per_slot, 6),
        }


@dataclass(frozen=True)
class Placement:
    """``count`` instances of an op on the offering named ``offering``."""

    offering: str
    count: int


def offering_name(flavor: str, zone: str | None = None, subnet: str | None = None) -> str:
    """The default name of an offering: ``flavor``, then ``@zone`` and ``@subnet`` when set."""
    return "@".join(part for part in (flavor, zone, subnet) if part)


def valid_name(name: str) -> bool:
    """Whether ``name`` can be an offering's name."""
    return _NAME.match(name) is not None


def by_cost(offerings: Sequence[Offering]) -> list[Offering]:
    """Lowest cost per slot first; ties keep the configured order (a stable sort)."""
    return sorted(offerings, key=lambda o: o.cost_per_slot)


def default_offering(offerings: Sequence[Offering]) -> Offering:
    """The offering of keys whose intent names none: the first configured."""
    if not offerings:
        raise ValueError("a template needs at least one offering on each of its providers")
    return offerings[0]


def placement_detail(placements: Sequence[Placement]) -> str:
    """The ``detail`` of a create intent placing its keys on ``placements``, in key order."""
    if not placements or len(placements) > MAX_PLACEMENTS:
        raise ValueError(f"an op places on 1 to {MAX_PLACEMENTS} offerings, not {len(placements)}")
    for p in placements:
        if p.count <= 0 or not valid_name(p.offering):
            raise ValueError(f"placement {p.offering!r}={p.count}: a valid offering name and a positive count")
    body = [[p.offering, p.count] for p in placements]
    return _PLACEMENT_PREFIX + json.dumps(body, separators=(",", ":"))


def placements_of(detail: str) -> list[Placement] | None:
    """The placements a create intent's ``detail`` names; None when it names none (or is malformed:
    a detail is the controller's copy, read as untrusted input)."""
    if not detail.startswith(_PLACEMENT_PREFIX):
        return None
    try:
        body = json.loads(detail[len(_PLACEMENT_PREFIX) :])
    except ValueError:
        return None
    if not isinstance(body, list) or not body or len(body) > MAX_PLACEMENTS:
        return None
    out: list[Placement] = []
    for item in body:
        if not (isinstance(item, list) and len(item) == 2):
            return None
        name, count = item
        if not isinstance(name, str) or not valid_name(name) or type(count) is not int or count <= 0:
            return None
        out.append(Placement(name, count))
    return out


def offering_at(placements: Sequence[Placement] | None, index: int, default: str) -> str:
    """The offering of an op's key number ``index`` (``default`` without placements or past them)."""
    if placements:
        first = 0
        for p in placements:
            if index < first + p.count:
                return p.offering
            first += p.count
    return default
