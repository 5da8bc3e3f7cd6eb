"""The simulated cloud's flavor catalogue: what each flavor is (cpus, memory, gpus), what it costs
and in which zones it is offered.

The catalogue is the table ``flavors`` of the store, read by the ``xcesim_flavors`` data source
(``provider.py``) the way the aws and openstack modules read their clouds' catalogues: a
template's ``select:`` picks flavors from it (docs/configuration.md, "Selecting flavors from the
catalogue"). A new store, and an older store on its first open by this version (the table is
added, a migration with nothing to move), is seeded once with :data:`DEFAULT_FLAVORS`: the
flavors the shipped configuration and the quickstart name, a few sizes, one GPU flavor, zones
a, b and c. ``xceprov sim cloud flavor set|remove`` change it afterwards; a removed flavor
stays removed (the seed is marked done in ``meta``). ``cost_per_hour`` may be unset: a catalogue
without prices, as EC2's is, where the selection's ``cost_per_cpu_hour`` prices the flavor.

The catalogue describes; it does not police: a create of a flavor that is not in it still
launches (the instances of a site that names its flavors are not refused by a catalogue edit).
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from collections.abc import Sequence
from typing import Final

from orchestrator.model.catalogue import Flavor
from orchestrator.sim.cloud.db import Database, meta, set_meta

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS flavors (
    name          TEXT PRIMARY KEY,
    cpus          INTEGER NOT NULL,
    memory_gb     REAL NOT NULL,
    gpus          INTEGER NOT NULL,
    -- NULL: the catalogue gives no price for this flavor.
    cost_per_hour REAL,
    -- A JSON list of zone names, in the order listed.
    zones         TEXT NOT NULL
);
"""

# ``meta`` key set once the default catalogue was written (a removed flavor is not put back).
_SEEDED: Final = "flavors_seeded"

# A flavor's or zone's name: no ``@`` (an offering is named ``flavor@zone``), no spaces.
NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
MAX_CPUS: Final = 1024
MAX_MEMORY_GB: Final = 65536.0
MAX_GPUS: Final = 64
MAX_ZONES: Final = 16
MAX_COST: Final = 1_000_000.0


ZONES: Final = ("a", "b", "c")
DEFAULT_FLAVORS: Final = (
    Flavor("c2.medium", 2, 4.0, 0, 0.085, ZONES),
    Flavor("c4.large", 4, 16.0, 0, 0.17, ZONES),
    Flavor("c8.large", 8, 32.0, 0, 0.34, ZONES),
    Flavor("c8.large.spot", 8, 32.0, 0, 0.11, ("a", "b")),
    Flavor("m8.xlarge", 8, 64.0, 0, 0.45, ZONES),
    Flavor("c16.xlarge", 16, 64.0, 0, 0.68, ZONES),
    Flavor("g4.xlarge", 32, 256.0, 4, 3.06, ("a", "b")),
)


def problem(flavor: Flavor) -> str | None:
    """What is wrong with ``flavor`` as a catalogue entry (None when nothing is)."""
    if not _NAME.match(flavor.name):
        return f"flavor name {flavor.name!r} must match {NAME_PATTERN}"
    if not 1 <= flavor.cpus <= MAX_CPUS:
        return f"cpus {flavor.cpus} must be 1 to {MAX_CPUS}"
    if not (math.isfinite(flavor.memory_gb) and 0 < flavor.memory_gb <= MAX_MEMORY_GB):
        return f"memory {flavor.memory_gb:g} GB must be above 0 and at most {MAX_MEMORY_GB:g}"
    if not 0 <= flavor.gpus <= MAX_GPUS:
        return f"gpus {flavor.gpus} must be 0 to {MAX_GPUS}"
    cost = flavor.cost_per_hour
    if cost is not None and not (math.isfinite(cost) and 0 <= cost <= MAX_COST):
        return f"cost {cost:g} per hour must be 0 to {MAX_COST:g}"
    if len(flavor.zones) > MAX_ZONES:
        return f"{len(flavor.zones)} zones: at most {MAX_ZONES}"
    for zone in flavor.zones:
        if not _NAME.match(zone):
            return f"zone name {zone!r} must match {NAME_PATTERN}"
    if len(set(flavor.zones)) != len(flavor.zones):
        return "a zone is listed twice"
    return None


def seed(conn: sqlite3.Connection) -> None:
    """Write the default catalogue once (inside the store's schema transaction)."""
    if meta(conn, _SEEDED) is not None:
        return
    for flavor in DEFAULT_FLAVORS:
        _put(conn, flavor, replace=False)
    set_meta(conn, _SEEDED, "1")


def _put(conn: sqlite3.Connection, flavor: Flavor, *, replace: bool) -> None:
    verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
    conn.execute(
        f"{verb} INTO flavors(name, cpus, memory_gb, gpus, cost_per_hour, zones) VALUES (?, ?, ?, ?, ?, ?)",
        (flavor.name, flavor.cpus, flavor.memory_gb, flavor.gpus, flavor.cost_per_hour, json.dumps(flavor.zones)),
    )


def _row(row: Sequence[object]) -> Flavor:
    name, cpus, memory, gpus, cost, zones = row
    listed = json.loads(str(zones))
    return Flavor(
        str(name),
        int(str(cpus)),
        float(str(memory)),
        int(str(gpus)),
        None if cost is None else float(str(cost)),
        tuple(str(z) for z in listed) if isinstance(listed, list) else (),
    )


def flavors(db: Database) -> list[Flavor]:
    """The catalogue, by name."""
    with db.read() as conn:
        rows = conn.execute(
            "SELECT name, cpus, memory_gb, gpus, cost_per_hour, zones FROM flavors ORDER BY name"
        ).fetchall()
    return [_row(r) for r in rows]


def set_flavor(db: Database, flavor: Flavor) -> None:
    """Add ``flavor`` or replace the entry of its name; ``ValueError`` naming what is wrong."""
    wrong = problem(flavor)
    if wrong is not None:
        raise ValueError(wrong)
    with db.write() as conn:
        _put(conn, flavor, replace=True)


def remove_flavor(db: Database, name: str) -> bool:
    """Remove flavor ``name``; False when the catalogue has none of that name."""
    with db.write() as conn:
        return conn.execute("DELETE FROM flavors WHERE name = ?", (name,)).rowcount > 0
