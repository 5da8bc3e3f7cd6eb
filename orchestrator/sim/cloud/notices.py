"""Spot interruption notices: the cloud warns, then reclaims at the time it said.

``xceprov sim fault spot-notice`` records a notice per running instance (``issue``): when it was
given (``noticed_at``) and when the cloud takes the instance back (``reclaim_at``, the notice's
lead later; EC2 gives two minutes). The cloud has no clock process: every store operation first
reclaims what is due (``due``, run from ``CloudStore.expire_due``, one indexed read when nothing
is), so whoever looks at the cloud (a Terraform refresh, the host manager's poll every 0.5 s,
the orchestrator's notice poll) sees the instance terminated, reason ``spot-reclaim``, from
``reclaim_at`` on, its simulated host torn down by the host manager like any terminated one.

A notice is kept after its reclaim (``reclaimed_at`` set): readers show it as history. One
notice per instance: a second notice of a noticed instance keeps the first (a cloud does not
move a reclaim it announced). The table is added to any store (``CREATE TABLE IF NOT EXISTS``):
no migration step.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from orchestrator.sim.cloud.records import rfc3339

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS notices (
    instance_id  TEXT PRIMARY KEY,
    kind         TEXT NOT NULL,
    noticed_at   REAL NOT NULL,
    reclaim_at   REAL NOT NULL,
    -- NULL until the cloud reclaimed the instance (or it ended otherwise first).
    reclaimed_at REAL
);
CREATE INDEX IF NOT EXISTS notices_pending ON notices(reclaim_at) WHERE reclaimed_at IS NULL;
"""

# The only kind the simulated cloud gives (EC2's "instance-action: terminate").
KIND_SPOT: Final = "spot-interruption"
# The default lead of a notice: EC2's two-minute Spot interruption warning.
DEFAULT_LEAD: Final = 120.0


@dataclass(frozen=True)
class Notice:
    """One interruption notice as the cloud reports it (Unix seconds)."""

    instance_id: str
    kind: str
    noticed_at: float
    reclaim_at: float
    reclaimed_at: float | None = None

    @property
    def pending(self) -> bool:
        """The cloud has not reclaimed the instance yet."""
        return self.reclaimed_at is None

    def to_json(self) -> dict[str, object]:
        """JSON-ready, times as RFC 3339 (the shape of ``sim fault show --json``'s ``notices``)."""
        return {
            "instance_id": self.instance_id,
            "kind": self.kind,
            "noticed_at": rfc3339(self.noticed_at),
            "reclaim_at": rfc3339(self.reclaim_at),
            "reclaimed_at": "" if self.reclaimed_at is None else rfc3339(self.reclaimed_at),
        }


_COLUMNS: Final = "instance_id, kind, noticed_at, reclaim_at, reclaimed_at"


def issue(conn: sqlite3.Connection, instance_ids: Sequence[str], now: float, lead: float) -> list[Notice]:
    """Record a notice for each of ``instance_ids`` (inside the caller's write transaction); an
    instance noticed before keeps its first notice. Returns the notices as they now stand."""
    conn.executemany(
        "INSERT OR IGNORE INTO notices(instance_id, kind, noticed_at, reclaim_at) VALUES (?, ?, ?, ?)",
        [(iid, KIND_SPOT, now, now + lead) for iid in instance_ids],
    )
    return read(conn, instance_ids)


def due(conn: sqlite3.Connection, now: float) -> list[tuple[str, float]]:
    """(instance id, reclaim_at) of every pending notice due at ``now``, earliest first."""
    rows = conn.execute(
        "SELECT instance_id, reclaim_at FROM notices WHERE reclaimed_at IS NULL AND reclaim_at <= ? "
        "ORDER BY reclaim_at",
        (now,),
    ).fetchall()
    return [(str(r[0]), float(r[1])) for r in rows]


def settle(conn: sqlite3.Connection, instance_id: str, when: float) -> None:
    """The noticed instance is gone (reclaimed, or ended otherwise first): its notice is history."""
    conn.execute(
        "UPDATE notices SET reclaimed_at = ? WHERE instance_id = ? AND reclaimed_at IS NULL", (when, instance_id)
    )


def read(conn: sqlite3.Connection, instance_ids: Sequence[str] | None = None) -> list[Notice]:
    """Notices of ``instance_ids`` (every notice when None), oldest first."""
    if instance_ids is None:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM notices ORDER BY noticed_at, instance_id").fetchall()
    else:
        rows = []
        for iid in instance_ids:
            rows.extend(conn.execute(f"SELECT {_COLUMNS} FROM notices WHERE instance_id = ?", (iid,)).fetchall())
        rows.sort(key=lambda r: (float(r[2]), str(r[0])))
    return [Notice(str(r[0]), str(r[1]), float(r[2]), float(r[3]), None if r[4] is None else float(r[4])) for r in rows]
