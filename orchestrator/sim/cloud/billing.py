"""The simulated cloud's own billing records: what each instance cost, per second, at the cloud's prices.

The cloud keeps, per instance, its billing segments (table ``billing``): one row per stretch of
time in one state, ``running`` from its launch time, ``stopped`` from a stop, ``running`` again
from a start, each closed by the next transition or the termination, in the transaction that
makes the change (``store.py`` calls :func:`open_segment`, :func:`transition`, :func:`close`).
The price is fixed when the segment opens, from the flavor catalogue (``catalogue.py``): a
running segment at the flavor's ``cost_per_hour``; a flavor not in the catalogue, or one listed
without a price, at 0 and named in the bill (``unpriced``). A stopped segment bills 0: the
catalogue has no stopped price (EC2 bills a stopped instance's volumes, not its compute; the
simulated cloud has no volumes), so a ledger that prices warm-pool instances at a
``stopped_cost_per_hour`` above 0 differs from this bill by that much.

Seconds are the cloud's own clock, to the second of the launch time it reports (RFC 3339, whole
seconds) and the clock's time of the stop, start or termination. A store made before this
table gets, on its first open, one running segment per instance it has (launch time to
termination, stops not known): :func:`backfill`.

The bill (:func:`bill`) clips every segment to ``[since, until)``; an open segment ends at
``until`` (``now`` when not given).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from orchestrator.model.costs import overlap
from orchestrator.model.tags import CLUSTER as CLUSTER_TAG
from orchestrator.model.tags import PROVIDER as PROVIDER_TAG
from orchestrator.sim.cloud.db import Database, meta, set_meta

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS billing (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    instance_id   TEXT NOT NULL,
    state         TEXT NOT NULL,
    flavor        TEXT NOT NULL,
    -- The price per hour while in this state; 0 when unpriced (see priced).
    cost_per_hour REAL NOT NULL,
    -- 1: the catalogue priced it (or the state bills 0 by rule); 0: the flavor had no price.
    priced        INTEGER NOT NULL,
    started       REAL NOT NULL,
    -- NULL while the segment is open.
    ended         REAL
);
CREATE INDEX IF NOT EXISTS billing_open ON billing(instance_id) WHERE ended IS NULL;
"""

RUNNING: Final = "running"
STOPPED: Final = "stopped"
_BACKFILLED: Final = "billing_backfilled"


def unix_of(rfc3339: str) -> float:
    """Unix seconds of the store's RFC 3339 times (``2026-01-02T03:04:05Z``)."""
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _price(conn: sqlite3.Connection, flavor: str, state: str) -> tuple[float, bool]:
    """(cost per hour, priced) of ``flavor`` in ``state`` from the catalogue as it stands now."""
    if state != RUNNING:
        return 0.0, True
    row = conn.execute("SELECT cost_per_hour FROM flavors WHERE name = ?", (flavor,)).fetchone()
    if row is None or row[0] is None:
        return 0.0, False
    return float(row[0]), True


def open_segment(conn: sqlite3.Connection, instance_id: str, flavor: str, state: str, at: float) -> None:
    """Start billing ``instance_id`` in ``state`` from ``at`` (inside the caller's write transaction)."""
    cost, priced = _price(conn, flavor, state)
    conn.execute(
        "INSERT INTO billing(instance_id, state, flavor, cost_per_hour, priced, started) VALUES (?, ?, ?, ?, ?, ?)",
        (instance_id, state, flavor, cost, int(priced), at),
    )


def close(conn: sqlite3.Connection, instance_id: str, at: float) -> None:
    """End the open segment of ``instance_id`` at ``at`` (its termination, or a transition)."""
    conn.execute("UPDATE billing SET ended = ? WHERE instance_id = ? AND ended IS NULL", (at, instance_id))


def transition(conn: sqlite3.Connection, instance_id: str, state: str, at: float) -> None:
    """``instance_id`` moved to ``state`` (stop, start) at ``at``: close the open segment, open the next."""
    row = conn.execute("SELECT flavor FROM instances WHERE id = ?", (instance_id,)).fetchone()
    close(conn, instance_id, at)
    if row is not None:
        open_segment(conn, instance_id, str(row[0]), state, at)


def backfill(conn: sqlite3.Connection) -> None:
    """Once per store: a running segment for every instance launched before billing existed."""
    if meta(conn, _BACKFILLED) is not None:
        return
    rows = conn.execute(
        "SELECT id, flavor, launch_time, terminated_at FROM instances i "
        "WHERE NOT EXISTS (SELECT 1 FROM billing b WHERE b.instance_id = i.id)"
    ).fetchall()
    for iid, flavor, launched, terminated in rows:
        open_segment(conn, str(iid), str(flavor), RUNNING, unix_of(str(launched)))
        if terminated:
            close(conn, str(iid), unix_of(str(terminated)))
    set_meta(conn, _BACKFILLED, "1")


@dataclass
class BillLine:
    """One instance's charges within the bill's period."""

    instance_id: str
    name: str
    flavor: str
    provider: str
    cluster: str
    running_seconds: float = 0.0
    stopped_seconds: float = 0.0
    cost: float = 0.0
    unpriced: bool = False

    def to_json(self) -> dict[str, object]:
        """JSON-ready (the shape of ``sim cloud bill --json``'s ``instances``)."""
        return {
            "instance_id": self.instance_id,
            "name": self.name,
            "flavor": self.flavor,
            "provider": self.provider,
            "cluster": self.cluster,
            "running_seconds": round(self.running_seconds, 3),
            "stopped_seconds": round(self.stopped_seconds, 3),
            "cost": round(self.cost, 6),
            "unpriced": self.unpriced,
        }


@dataclass
class Bill:
    """The cloud's bill for ``[since, until)``: per instance lines and totals."""

    since: float
    until: float
    lines: list[BillLine] = field(default_factory=list)

    @property
    def total(self) -> float:
        """Money billed in the period."""
        return sum(line.cost for line in self.lines)

    @property
    def unpriced_flavors(self) -> list[str]:
        """Flavors billed at 0 because the catalogue has no price for them."""
        return sorted({line.flavor for line in self.lines if line.unpriced})

    def to_json(self) -> dict[str, object]:
        """The ``sim cloud bill --json`` document (store path added by the CLI)."""
        return {
            "since": self.since,
            "until": self.until,
            "instances": [line.to_json() for line in self.lines],
            "total": {
                "cost": round(self.total, 6),
                "instances": len(self.lines),
                "running_seconds": round(sum(line.running_seconds for line in self.lines), 3),
                "stopped_seconds": round(sum(line.stopped_seconds for line in self.lines), 3),
                "unpriced_flavors": self.unpriced_flavors,
            },
        }


_SEGMENTS: Final = (
    "SELECT b.instance_id, i.name, b.flavor, b.state, b.cost_per_hour, b.priced, b.started, b.ended, "
    "COALESCE((SELECT value FROM tags t WHERE t.instance_id = b.instance_id AND t.key = ?), ''), "
    "COALESCE((SELECT value FROM tags t WHERE t.instance_id = b.instance_id AND t.key = ?), '') "
    "FROM billing b JOIN instances i ON i.id = b.instance_id "
    "WHERE b.started < ? AND (b.ended IS NULL OR b.ended > ?) ORDER BY b.seq"
)


def bill(db: Database, since: float, until: float) -> Bill:
    """The bill for ``[since, until)``: every instance billed in it, in order of its first segment."""
    with db.read() as conn:
        rows: Sequence[Sequence[object]] = conn.execute(_SEGMENTS, (PROVIDER_TAG, CLUSTER_TAG, until, since)).fetchall()
    lines: dict[str, BillLine] = {}
    for iid, name, flavor, state, cost, priced, started, ended, provider, cluster in rows:
        line = lines.setdefault(str(iid), BillLine(str(iid), str(name), str(flavor), str(provider), str(cluster)))
        end = until if ended is None else float(str(ended))
        seconds = overlap(float(str(started)), end, since, until)
        if state == RUNNING:
            line.running_seconds += seconds
        else:
            line.stopped_seconds += seconds
        line.cost += seconds * float(str(cost)) / 3600.0
        line.unpriced = line.unpriced or not int(str(priced))
    return Bill(since, until, list(lines.values()))
