"""What ``xceprov sim cloud flavors`` and ``xceprov sim cloud flavor set|remove`` do, apart from
argument parsing: values checked into one ``UsageError`` line, the catalogue read and changed
(``catalogue.py``), and its table."""

from __future__ import annotations

import math
from collections.abc import Sequence

from orchestrator.errors import UsageError
from orchestrator.model.catalogue import Flavor
from orchestrator.sim.cloud import catalogue
from orchestrator.sim.cloud.db import Database
from orchestrator.sim.cloud.service import aligned
from orchestrator.sim.cloud.store import CloudStore


def _db(store: CloudStore) -> Database:
    # The store's own file; CloudStore made and migrated it (the table and its seed).
    return Database(store.path)


def flavors(store: CloudStore) -> list[Flavor]:
    """The catalogue, by name."""
    return catalogue.flavors(_db(store))


def _whole(option: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"bad {option} {text!r}: expected a whole number") from None


def _number(option: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"bad {option} {text!r}: expected a number") from None
    if not math.isfinite(value):
        raise UsageError(f"bad {option} {text!r}: expected a finite number")
    return value


def set_flavor(
    store: CloudStore, name: str, cpus: str, memory_gb: str, gpus: str, cost: str | None, zones: Sequence[str]
) -> Flavor:
    """Add or replace flavor ``name``; bad input is one usage line naming the value."""
    flavor = Flavor(
        name,
        _whole("--cpus", cpus),
        _number("--memory-gb", memory_gb),
        _whole("--gpus", gpus),
        None if cost is None else _number("--cost", cost),
        tuple(zones),
    )
    try:
        catalogue.set_flavor(_db(store), flavor)
    except ValueError as exc:
        raise UsageError(f"flavor {name!r}: {exc}") from None
    return flavor


def remove_flavor(store: CloudStore, name: str) -> None:
    """Remove flavor ``name``; an unknown name is a usage error."""
    if not catalogue.remove_flavor(_db(store), name):
        raise UsageError(f"no flavor {name!r} in the simulated cloud's catalogue")


def format_flavors(found: Sequence[Flavor]) -> str:
    """The ``xceprov sim cloud flavors`` table: one line per flavor under a header."""
    rows = [("NAME", "CPUS", "MEMORY_GB", "GPUS", "COST_PER_HOUR", "ZONES")]
    for f in found:
        cost = "-" if f.cost_per_hour is None else f"{f.cost_per_hour:g}"
        rows.append((f.name, str(f.cpus), f"{f.memory_gb:g}", str(f.gpus), cost, ",".join(f.zones) or "-"))
    return aligned(rows)
