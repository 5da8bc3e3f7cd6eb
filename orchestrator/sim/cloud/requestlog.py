"""The cloud's request journal: every create and delete request the API received, and its outcome.

The mutation journal (``journal.py``) records what changed; this one records what was *asked*,
refused requests included: a create refused for capacity or quota changes nothing, yet it is
the attempt a capacity-aware launcher must not repeat in a loop. The benchmarks count create
attempts per offering (flavor, zone, subnet) from here (``create_attempts``).

A row: Unix time, action (``create``/``delete``), outcome, the instance's flavor, zone, subnet
and client token (the instance key), its id when there is one, the ``xce:cluster`` and
``xce:provider`` tags of the request (of the instance, for a delete), the caller's epoch and
the cloud's error text for a refusal. Outcomes: a create is ``created``, ``existing`` (a live
instance already had the token: returned, nothing launched), ``capacity``, ``quota`` or
``error`` (any other refusal, an injected API error included); a delete is ``deleted``,
``absent`` (already terminated or never existed) or ``error``. A create whose response the
fault ``lost-response`` drops is ``created``: the cloud did launch it.

Bounded: the newest ``KEPT`` rows stay; each append prunes what falls out (O(1) amortised,
by the primary key). Costs: one insert per request (in the create's own transaction when it
launched; a short write of its own for a refusal), a read O(rows returned).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from orchestrator.model.offerings import offering_name
from orchestrator.model.tags import CLUSTER as CLUSTER_TAG
from orchestrator.model.tags import PROVIDER as PROVIDER_TAG
from orchestrator.sim.cloud.errors import InstanceLimitExceeded, InsufficientCapacity

SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS requests (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    at           REAL NOT NULL,
    action       TEXT NOT NULL,
    outcome      TEXT NOT NULL,
    flavor       TEXT NOT NULL,
    zone         TEXT NOT NULL,
    subnet       TEXT NOT NULL,
    client_token TEXT NOT NULL,
    instance_id  TEXT NOT NULL,
    cluster      TEXT NOT NULL,
    provider     TEXT NOT NULL,
    epoch        TEXT NOT NULL,
    detail       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_at ON requests(at);
"""

# How many rows the journal keeps (the newest).
KEPT: Final = 100_000

CREATE: Final = "create"
DELETE: Final = "delete"

CREATED: Final = "created"
EXISTING: Final = "existing"
CAPACITY: Final = "capacity"
QUOTA: Final = "quota"
ERROR: Final = "error"
DELETED: Final = "deleted"
ABSENT: Final = "absent"


@dataclass(frozen=True)
class Request:
    """One request the cloud received and what it answered."""

    seq: int
    at: float
    action: str
    outcome: str
    flavor: str
    zone: str
    subnet: str
    client_token: str
    instance_id: str
    cluster: str
    provider: str
    epoch: str
    # The cloud's one-line error for a refusal ("" otherwise).
    detail: str = ""

    @property
    def offering(self) -> str:
        """The offering the request was for: ``flavor[@zone][@subnet]`` (``model/offerings.py``)."""
        return offering_name(self.flavor, self.zone or None, self.subnet or None)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (the shape of ``xceprov sim cloud requests --json``)."""
        return {
            "seq": self.seq,
            "at": self.at,
            "action": self.action,
            "outcome": self.outcome,
            "flavor": self.flavor,
            "zone": self.zone,
            "subnet": self.subnet,
            "offering": self.offering,
            "client_token": self.client_token,
            "instance_id": self.instance_id,
            "cluster": self.cluster,
            "provider": self.provider,
            "epoch": self.epoch,
            "detail": self.detail,
        }


def outcome_of(exc: BaseException) -> str:
    """The outcome a refused create is journalled with."""
    if isinstance(exc, InsufficientCapacity):
        return CAPACITY
    if isinstance(exc, InstanceLimitExceeded):
        return QUOTA
    return ERROR


def append(
    conn: sqlite3.Connection,
    at: float,
    action: str,
    outcome: str,
    *,
    flavor: str,
    zone: str,
    subnet: str,
    client_token: str,
    tags: Mapping[str, str],
    instance_id: str = "",
    epoch: str = "",
    detail: str = "",
    kept: int = KEPT,
) -> None:
    """Append one request (inside the caller's write transaction) and prune past ``kept`` rows."""
    seq = conn.execute(
        "INSERT INTO requests(at, action, outcome, flavor, zone, subnet, client_token, instance_id, "
        "cluster, provider, epoch, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
        (
            at,
            action,
            outcome,
            flavor,
            zone,
            subnet,
            client_token,
            instance_id,
            tags.get(CLUSTER_TAG, ""),
            tags.get(PROVIDER_TAG, ""),
            epoch,
            detail,
        ),
    ).fetchone()[0]
    conn.execute("DELETE FROM requests WHERE seq <= ?", (int(seq) - kept,))


def append_delete(
    conn: sqlite3.Connection, at: float, instance_id: str, outcome: str, epoch: str, detail: str = ""
) -> None:
    """Append a delete request of ``instance_id``, described by its row and tags when it has one."""
    row = conn.execute(
        "SELECT flavor, zone, subnet, client_token FROM instances WHERE id = ?", (instance_id,)
    ).fetchone()
    tags = dict(
        conn.execute(
            "SELECT key, value FROM tags WHERE instance_id = ? AND key IN (?, ?)",
            (instance_id, CLUSTER_TAG, PROVIDER_TAG),
        ).fetchall()
    )
    flavor, zone, subnet, token = ("", "", "", "") if row is None else (str(v) for v in row)
    append(
        conn,
        at,
        DELETE,
        outcome,
        flavor=flavor,
        zone=zone,
        subnet=subnet,
        client_token=token,
        tags={str(k): str(v) for k, v in tags.items()},
        instance_id=instance_id,
        epoch=epoch,
        detail=detail,
    )


def read(conn: sqlite3.Connection, since: float = 0.0) -> list[Request]:
    """The requests received at or after Unix time ``since``, oldest first."""
    rows = conn.execute(
        "SELECT seq, at, action, outcome, flavor, zone, subnet, client_token, instance_id, cluster, "
        "provider, epoch, detail FROM requests WHERE at >= ? ORDER BY seq",
        (since,),
    ).fetchall()
    return [Request(int(r[0]), float(r[1]), *(str(v) for v in r[2:])) for r in rows]


def create_attempts(requests: Iterable[Request], provider: str | None = None) -> dict[str, int]:
    """Create requests per offering name (refused ones included), of one ``provider`` when given."""
    counts: Counter[str] = Counter(
        r.offering for r in requests if r.action == CREATE and (provider is None or r.provider == provider)
    )
    return dict(counts)
