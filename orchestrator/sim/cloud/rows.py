"""Instances read back from the store's rows: the columns, the tag filter, one row to an ``Instance``."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Final

from orchestrator.sim.cloud.addresses import addr_text
from orchestrator.sim.cloud.records import Instance, rfc3339

COLUMNS: Final = (
    "seq, id, name, flavor, image, user_data, client_token, addr, launch_time, state, "
    "state_reason, terminated_at, version, expires_at, zone, subnet"
)

# Live instances past their expiry at a given Unix time (uses the partial index instances_live_expiry).
DUE: Final = (
    "SELECT id, addr, flavor, expires_at FROM instances "
    "WHERE state != 'terminated' AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at"
)


def select(conn: sqlite3.Connection, where: str, params: list[object], order: str = "i.seq") -> list[Instance]:
    """The instances matching ``where`` (over ``instances i``) with their tags, in ``order``."""
    rows = conn.execute(
        f"SELECT {', '.join('i.' + c.strip() for c in COLUMNS.split(','))} FROM instances i "
        f"WHERE {where} ORDER BY {order}",
        params,
    ).fetchall()
    tags = tags_of(conn, "instances i", "i", where, params)
    return [_instance(row, tags.get(row[1], {})) for row in rows]


def tags_of(
    conn: sqlite3.Connection, table: str, alias: str, where: str, params: list[object]
) -> dict[str, dict[str, str]]:
    """The tags of the rows of ``table`` (``"instances i"``, ``"images m"``) matching ``where``, by id."""
    tags: dict[str, dict[str, str]] = {}
    for owner_id, key, value in conn.execute(
        f"SELECT t.instance_id, t.key, t.value FROM tags t JOIN {table} ON {alias}.id = t.instance_id WHERE {where}",
        params,
    ):
        tags.setdefault(str(owner_id), {})[str(key)] = str(value)
    return tags


def row_to_instance(conn: sqlite3.Connection, row: tuple[object, ...]) -> Instance:
    """One row of ``COLUMNS`` as an ``Instance``, its tags read."""
    tags = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM tags WHERE instance_id = ?", (row[1],))}
    return _instance(row, tags)


def where(tag_filter: Mapping[str, str] | None, include_terminated: bool) -> tuple[str, list[object]]:
    """The ``WHERE`` clause (over ``instances i``) and its parameters of a listing."""
    clauses: list[str] = []
    params: list[object] = []
    if not include_terminated:
        clauses.append("i.state != 'terminated'")
    for key, value in (tag_filter or {}).items():
        clauses.append("EXISTS (SELECT 1 FROM tags f WHERE f.instance_id = i.id AND f.key = ? AND f.value = ?)")
        params.extend((key, value))
    return (" AND ".join(clauses) or "1"), params


def _instance(row: tuple[object, ...], tags: Mapping[str, str]) -> Instance:
    (
        _seq,
        iid,
        name,
        flavor,
        image,
        user_data,
        token,
        addr,
        launch,
        state,
        reason,
        term_at,
        version,
        expires,
        zone,
        subnet,
    ) = row
    return Instance(
        id=str(iid),
        name=str(name),
        flavor=str(flavor),
        image=str(image),
        tags=dict(tags),
        user_data=str(user_data),
        client_token=str(token),
        address=addr_text(int(addr)),  # type: ignore[call-overload]
        launch_time=str(launch),
        state=str(state),  # type: ignore[arg-type]
        state_reason=str(reason),
        terminated_at=str(term_at),
        expires_at="" if expires is None else rfc3339(float(expires)),  # type: ignore[arg-type]
        zone=str(zone),
        subnet=str(subnet),
        version=int(version),  # type: ignore[call-overload]
    )
