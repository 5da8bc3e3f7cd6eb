"""The cloud store's tables, and the migrations of a store written by an older version.

One row per instance (and one row per tag); idempotency by ``client_token`` and address
uniqueness are *also* enforced by partial unique indexes, so that even a logic slip cannot give
two live instances one token or one address.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from orchestrator.model.tags import MAX_LIFETIME
from orchestrator.sim.cloud import billing, bootcopy, catalogue, notices, requestlog
from orchestrator.sim.cloud.addresses import FIRST_OFFSET
from orchestrator.sim.cloud.db import meta, set_meta
from orchestrator.sim.cloud.errors import CloudError
from orchestrator.sim.cloud.records import expiry_of

SCHEMA_VERSION: Final = 6

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS instances (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    flavor        TEXT NOT NULL,
    image         TEXT NOT NULL,
    user_data     TEXT NOT NULL,
    client_token  TEXT NOT NULL,
    addr          INTEGER NOT NULL,
    launch_time   TEXT NOT NULL,
    state         TEXT NOT NULL,
    state_reason  TEXT NOT NULL DEFAULT '',
    terminated_at TEXT NOT NULL DEFAULT '',
    version       INTEGER NOT NULL,
    -- Unix time of launch_time + xce:max_lifetime; NULL: never expires (schema 3).
    expires_at    REAL,
    -- Where the instance was placed (schema 6); "" when the create named none.
    zone          TEXT NOT NULL DEFAULT '',
    subnet        TEXT NOT NULL DEFAULT ''
);
-- Live instances own their token and their address; terminated ones release both.
CREATE UNIQUE INDEX IF NOT EXISTS instances_live_token
    ON instances(client_token) WHERE state != 'terminated' AND client_token != '';
CREATE UNIQUE INDEX IF NOT EXISTS instances_live_addr
    ON instances(addr) WHERE state != 'terminated';
CREATE INDEX IF NOT EXISTS instances_state ON instances(state);
CREATE INDEX IF NOT EXISTS instances_flavor_state ON instances(flavor, state);
CREATE INDEX IF NOT EXISTS instances_version ON instances(version);
-- Tags of instances and of images (schema 5): an image id (img-...) never equals an instance id (i-...).
CREATE TABLE IF NOT EXISTS tags (
    instance_id TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    PRIMARY KEY (instance_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tags_key_value ON tags(key, value);
-- Addresses given back by terminated instances, reused before fresh ones (O(1) allocation).
CREATE TABLE IF NOT EXISTS free_addresses (
    addr INTEGER PRIMARY KEY
);
-- Live (not terminated) instances per flavor, kept with every launch and termination so that a
-- capacity check is O(1) instead of a count over the flavor's instances.
CREATE TABLE IF NOT EXISTS flavor_live (
    flavor TEXT PRIMARY KEY,
    live   INTEGER NOT NULL
);
-- The same per flavor and zone (schema 6): what a zone's capacity limit is checked against.
CREATE TABLE IF NOT EXISTS zone_live (
    flavor TEXT NOT NULL,
    zone   TEXT NOT NULL,
    live   INTEGER NOT NULL,
    PRIMARY KEY (flavor, zone)
) WITHOUT ROWID;
-- Capacity limits: zone "" limits the flavor's live instances in every zone together; a named
-- zone limits those placed in it (schema 6 added the zone).
CREATE TABLE IF NOT EXISTS capacity (
    flavor   TEXT NOT NULL,
    zone     TEXT NOT NULL DEFAULT '',
    max_live INTEGER NOT NULL,
    PRIMARY KEY (flavor, zone)
);
-- Images (schema 5): snapshots of an instance's files, kept under <store dir>/images/<id>/.
CREATE TABLE IF NOT EXISTS images (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    id            TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    instance_id   TEXT NOT NULL,
    source_image  TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    state         TEXT NOT NULL,
    deleted_at    TEXT NOT NULL DEFAULT ''
);
-- The mutation journal (schema 4): one row per change of an instance, in commit order.
CREATE TABLE IF NOT EXISTS mutations (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    at           REAL NOT NULL,
    cluster      TEXT NOT NULL,
    provider     TEXT NOT NULL,
    action       TEXT NOT NULL,
    instance_id  TEXT NOT NULL,
    client_token TEXT NOT NULL,
    epoch        TEXT NOT NULL,
    reason       TEXT NOT NULL DEFAULT ''
);
"""

# Created after the schema migration (a version 2 store has no expires_at column before it).
# Partial: the sweep looks only at live instances that can expire, so it stays O(due).
_EXPIRY_INDEX: Final = (
    "CREATE INDEX IF NOT EXISTS instances_live_expiry ON instances(expires_at) "
    "WHERE state != 'terminated' AND expires_at IS NOT NULL"
)


def init_schema(conn: sqlite3.Connection) -> None:
    """Create the tables of a new store, or migrate an older one (inside a write transaction)."""
    # The boot copies', the request journal's, the flavor catalogue's and the notices' tables
    # (bootcopy.py, requestlog.py, catalogue.py, notices.py) and the billing records (billing.py,
    # backfilled once) need no migration step: a store of any
    # version gets them (the catalogue seeded once).
    tables = (bootcopy.SCHEMA, requestlog.SCHEMA, catalogue.SCHEMA, notices.SCHEMA, billing.SCHEMA)
    for statement in _split_sql(_SCHEMA + "".join(tables)):
        conn.execute(statement)
    conn.execute(
        "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?), ('next_addr', ?), "
        "('version', '0'), ('draws', '0')",
        (str(SCHEMA_VERSION), str(FIRST_OFFSET)),
    )
    schema = int(meta(conn, "schema") or 0)
    if schema < 2:
        # Version 1 stores had no per-flavor counters: derive them once.
        conn.execute("DELETE FROM flavor_live")
        conn.execute(
            "INSERT INTO flavor_live(flavor, live) SELECT flavor, COUNT(*) FROM instances "
            "WHERE state != 'terminated' GROUP BY flavor"
        )
    if schema < 3:
        _add_expiry(conn)
    conn.execute(_EXPIRY_INDEX)
    if schema < 6:
        _add_zones(conn)
    catalogue.seed(conn)
    billing.backfill(conn)
    if schema < SCHEMA_VERSION:
        set_meta(conn, "schema", str(SCHEMA_VERSION))


def _add_expiry(conn: sqlite3.Connection) -> None:
    """Schema 3: the ``expires_at`` column, filled in for live instances that carry the tag."""
    columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(instances)")}
    if "expires_at" not in columns:
        conn.execute("ALTER TABLE instances ADD COLUMN expires_at REAL")
    rows = conn.execute(
        "SELECT i.id, i.launch_time, t.value FROM instances i JOIN tags t ON t.instance_id = i.id "
        "WHERE i.state != 'terminated' AND t.key = ?",
        (MAX_LIFETIME,),
    ).fetchall()
    for instance_id, launch_time, value in rows:
        try:
            expires = expiry_of(str(launch_time), {MAX_LIFETIME: str(value)})
        except (CloudError, ValueError):
            # A value the cloud would have refused never had a lifetime: it does not expire.
            expires = None
        conn.execute("UPDATE instances SET expires_at = ? WHERE id = ?", (expires, instance_id))


def _add_zones(conn: sqlite3.Connection) -> None:
    """Schema 6: instances' ``zone`` and ``subnet`` ("" for those launched before), the live
    count per flavor and zone, and capacity limits keyed by flavor and zone (old limits: every zone)."""
    columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(instances)")}
    for column in ("zone", "subnet"):
        if column not in columns:
            conn.execute(f"ALTER TABLE instances ADD COLUMN {column} TEXT NOT NULL DEFAULT ''")
    conn.execute("DELETE FROM zone_live")
    conn.execute(
        "INSERT INTO zone_live(flavor, zone, live) SELECT flavor, zone, COUNT(*) FROM instances "
        "WHERE state != 'terminated' GROUP BY flavor, zone"
    )
    limits = {str(row[1]) for row in conn.execute("PRAGMA table_info(capacity)")}
    if "zone" not in limits:
        # The old table's key is the flavor alone: copy its limits into one keyed by both.
        conn.execute("ALTER TABLE capacity RENAME TO capacity_v5")
        conn.execute(
            "CREATE TABLE capacity (flavor TEXT NOT NULL, zone TEXT NOT NULL DEFAULT '', "
            "max_live INTEGER NOT NULL, PRIMARY KEY (flavor, zone))"
        )
        conn.execute("INSERT INTO capacity(flavor, zone, max_live) SELECT flavor, '', max_live FROM capacity_v5")
        conn.execute("DROP TABLE capacity_v5")


def _split_sql(script: str) -> list[str]:
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
