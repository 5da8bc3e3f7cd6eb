"""The mutation journal: every create, terminate, tag update, stop and start of an instance.

Appended in the transaction that makes the change, with the instance's ``xce:cluster`` and
``xce:provider`` tags, its client token and the epoch of the caller (the ``fence`` of the
Terraform run, see ``provider.py``; "" for the cloud's own actions and the ``xceprov sim``
tooling), so that a test can prove that two orchestrators never mutated one provider at once.
"""

from __future__ import annotations

import sqlite3

from orchestrator.model.tags import CLUSTER as CLUSTER_TAG
from orchestrator.model.tags import PROVIDER as PROVIDER_TAG
from orchestrator.sim.cloud.records import Mutation


def append(conn: sqlite3.Connection, at: float, action: str, instance_id: str, epoch: str, reason: str = "") -> None:
    """Append one mutation of ``instance_id`` at Unix time ``at`` (inside the caller's write transaction)."""
    owner_tags = dict(
        conn.execute(
            "SELECT key, value FROM tags WHERE instance_id = ? AND key IN (?, ?)",
            (instance_id, CLUSTER_TAG, PROVIDER_TAG),
        ).fetchall()
    )
    token = conn.execute("SELECT client_token FROM instances WHERE id = ?", (instance_id,)).fetchone()
    conn.execute(
        "INSERT INTO mutations(at, cluster, provider, action, instance_id, client_token, epoch, reason) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            at,
            str(owner_tags.get(CLUSTER_TAG, "")),
            str(owner_tags.get(PROVIDER_TAG, "")),
            action,
            instance_id,
            "" if token is None else str(token[0]),
            epoch,
            reason,
        ),
    )


def read(conn: sqlite3.Connection, since: int, provider: str | None) -> list[Mutation]:
    """The journal after sequence ``since``, in commit order (of one ``provider`` when given)."""
    where = "seq > ?"
    params: list[object] = [since]
    if provider is not None:
        where += " AND provider = ?"
        params.append(provider)
    rows = conn.execute(
        "SELECT seq, at, cluster, provider, action, instance_id, client_token, epoch, reason "
        f"FROM mutations WHERE {where} ORDER BY seq",
        params,
    ).fetchall()
    return [Mutation(int(r[0]), float(r[1]), *(str(v) for v in r[2:])) for r in rows]
