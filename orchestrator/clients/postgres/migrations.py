"""The shared store's schema ``xceprov`` and its versioned migrations.

``MIGRATIONS`` is an ordered tuple of ``(version, name, SQL)``; ``xceprov.migrations`` records
each one applied (``version`` primary key, ``name``, ``applied_at`` by the server's clock).
The rule: a migration, once released, is never edited; a change of the schema is a new entry
with the next version. :func:`migrate` applies the missing ones in order, each in its own
transaction that first takes ``pg_advisory_xact_lock`` (:data:`MIGRATION_LOCK`) and reads the
version again, so several orchestrators starting at once never race: one applies, the others
wait and find it done. A database whose version is newer than the last one here (written by a
newer toolkit) is refused with one line and left as it is.

The tables of version 1 (every row carries ``cluster``: several clusters may share a database):

- ``fences(cluster, provider, term, seq, updated_at)``: the newest lease epoch that wrote a
  document of the provider; a write by an older epoch is refused (see ``store.py``).
- ``documents(cluster, provider, name, body, epoch, updated_at)``: small state documents
  (desired sets, loop state, ...) as bytes; ``provider`` ``''`` holds cluster-wide ones;
  ``epoch`` is the tag (``term.seq``) of the writer, NULL for an unfenced write.
- ``members(cluster, instance, label, configured, held, heartbeat_at)``: one row per running
  orchestrator: its configured providers (JSON array), the providers it holds with their epoch
  tags (JSON object), the server's time of its last heartbeat.
- ``facts(cluster, seq, body, appended_at)``: the standalone fact journal; ``seq`` counts 1, 2,
  ... per cluster in commit order; ``body`` is the fact as a JSON object, stored as written
  (type ``json``, not ``jsonb``, which refuses a ``\\u0000`` that text from outside may hold).

Version 2 (the standalone lease, docs/scale-out.md "Without a controller"):

- ``standalone_leases(cluster, provider, holder, grant_no, expires_at, grace_s, granted_at,
  released_term, released_seq)``: the fence of standalone commands, one row per provider: its
  holder (``''`` once released), a counter of grants to a new holder, the end of the holder's
  lease by the server's clock and the grace after it before anyone else is admitted, and the
  newest controller epoch an operator handed over to standalone commands (``standalone.py``);
- ``members.live_for``: how long the member's heartbeat keeps it live (its own live window), so
  a reader that does not know the member's lease TTL (a standalone command) judges it the same
  way the daemons do, and a row long past it is removed (``store.py``).
"""

from __future__ import annotations

import hashlib
from typing import Final

from orchestrator.clients.postgres.session import Connection, Session
from orchestrator.errors import FinalError

SCHEMA: Final = "xceprov"


def advisory_key(name: str) -> int:
    """A 64-bit advisory-lock key for ``name`` (the first 8 bytes of its SHA-256, signed)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


MIGRATION_LOCK: Final = advisory_key("xceprov/migrations")

_BOOTSTRAP: Final = """
CREATE SCHEMA IF NOT EXISTS xceprov;
CREATE TABLE IF NOT EXISTS xceprov.migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"""

MIGRATIONS: Final[tuple[tuple[int, str, str], ...]] = (
    (
        1,
        "documents, fences, members, facts",
        """
CREATE TABLE xceprov.fences (
    cluster    text NOT NULL,
    provider   text NOT NULL,
    term       bigint NOT NULL,
    seq        bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (cluster, provider)
);
CREATE TABLE xceprov.documents (
    cluster    text NOT NULL,
    provider   text NOT NULL,
    name       text NOT NULL,
    body       bytea NOT NULL,
    epoch      text,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (cluster, provider, name)
);
CREATE TABLE xceprov.members (
    cluster      text NOT NULL,
    instance     text NOT NULL,
    label        text NOT NULL,
    configured   jsonb NOT NULL,
    held         jsonb NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    PRIMARY KEY (cluster, instance)
);
CREATE TABLE xceprov.facts (
    cluster     text NOT NULL,
    seq         bigint NOT NULL,
    body        json NOT NULL,
    appended_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (cluster, seq)
);
""",
    ),
    (
        2,
        "standalone leases, members' live window",
        """
CREATE TABLE xceprov.standalone_leases (
    cluster    text NOT NULL,
    provider   text NOT NULL,
    holder     text NOT NULL,
    grant_no   bigint NOT NULL,
    expires_at timestamptz NOT NULL,
    grace_s    double precision NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    released_term bigint NOT NULL DEFAULT 0,
    released_seq  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (cluster, provider)
);
ALTER TABLE xceprov.members ADD COLUMN live_for double precision;
""",
    ),
)

LATEST: Final = MIGRATIONS[-1][0]


def _version(conn: Connection) -> int:
    row = conn.execute("SELECT coalesce(max(version), 0) FROM xceprov.migrations").fetchone()
    return int(row[0]) if row is not None else 0


def _refuse_newer(version: int) -> None:
    if version > LATEST:
        raise FinalError(
            f"shared store: the database's schema {SCHEMA} is at version {version}, newer than this "
            f"toolkit knows ({LATEST}); upgrade the toolkit (a newer orchestrator migrated it)"
        )


def migrate(conn: Connection) -> int:
    """Bring the schema to :data:`LATEST` (see the module docstring); returns the version found
    before. ``FinalError`` for a newer schema; psycopg errors pass to the caller."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        # Only when missing: CREATE SCHEMA checks the CREATE privilege even with IF NOT EXISTS,
        # and a site may give the daemons a role that cannot create once the schema exists.
        if conn.execute("SELECT to_regclass('xceprov.migrations')").fetchone() == (None,):
            conn.execute(_BOOTSTRAP)
        found = _version(conn)
    _refuse_newer(found)
    for version, name, statements in MIGRATIONS:
        if version <= found:
            continue
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            current = _version(conn)  # another orchestrator may have applied it meanwhile
            _refuse_newer(current)
            if current < version:
                conn.execute(statements)
                conn.execute("INSERT INTO xceprov.migrations (version, name) VALUES (%s, %s)", (version, name))
    return found


def check_schema(conn_str: str, connect_timeout: float = 5.0) -> int:
    """The version of the database's schema (0: none yet), read without changing anything.

    What ``xceprov validate`` checks, as every other verb does when it opens the store:
    ``FinalError`` for a schema newer than this toolkit knows, ``StoreUnavailable`` when the
    server cannot be reached."""

    def read(conn: Connection) -> int:
        if conn.execute("SELECT to_regclass('xceprov.migrations')").fetchone() == (None,):
            return 0
        return _version(conn)

    session = Session(conn_str, connect_timeout)
    try:
        version = session.run("reading the schema version", read)
    finally:
        session.close()
    _refuse_newer(version)
    return version
