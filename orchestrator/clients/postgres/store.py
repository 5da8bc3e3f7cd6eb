"""The shared store of several orchestrators: documents, members and the standalone fact journal.

One :class:`SharedStore` per process and cluster, over one guarded connection (``session.py``).
The tables are described in ``migrations.py``; the behaviour, for site administrators, in
``docs/shared-store.md``.

The fence rule: a document write or removal that carries a lease epoch runs in one
transaction that locks the provider's row of ``xceprov.fences`` (``FOR UPDATE``) and compares:
an epoch older than the stored one raises ``LeaseLost`` and changes nothing (a zombie holder
of an old epoch never overwrites its successor's state); otherwise the stored epoch becomes the
newer of the two and the document is written. Writes without an epoch (cluster-wide documents,
read-only tools) skip the fence.

The update rule: :meth:`SharedStore.update_document` reads, changes and writes a document in one
transaction that first takes a transaction-scoped advisory lock of that document, so updaters
of one document take turns and each changes what the one before committed (a row lock cannot
serve: two first writers of an absent document would each find nothing to lock). Readers never
wait. Every cluster-wide document several orchestrators write records into (bootstrap records,
breakers, orphan action times) is changed this way, never by a plain write of a copy read before.

Members heartbeat with the server's clock (``clock_timestamp()``), never the caller's, so
orchestrators on machines whose clocks disagree still agree on who is live. A row whose heartbeat
is :data:`MEMBER_EXPIRY` past its own live window (a member killed with ``kill -9`` never leaves)
is removed by the next heartbeat or clean stop of any member of the cluster.

A write under a controller epoch is also refused while a standalone command holds the provider
(``standalone.py``): the two fences never admit two holders of one provider at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from orchestrator.clients.postgres.migrations import advisory_key, migrate
from orchestrator.clients.postgres.session import STATEMENT_TIMEOUT, Connection, Session
from orchestrator.clients.postgres.standalone import DEFAULT_LIVE_FOR, standalone_holding
from orchestrator.errors import LeaseLost, StoreUnavailable
from orchestrator.model.facts import Epoch

# How long past its own live window a member's row is kept before any member's heartbeat or clean
# stop removes it: far longer than anyone asks about it (the deal: the live window; a standalone
# command: the live window plus its grace), short enough that the table does not keep the dead.
MEMBER_EXPIRY: Final = 60.0

_EXPIRE_MEMBERS: Final = (
    "DELETE FROM xceprov.members WHERE cluster = %s AND instance <> %s "
    "AND heartbeat_at < clock_timestamp() - make_interval(secs => coalesce(live_for, %s) + %s)"
)


@dataclass(frozen=True)
class Member:
    """One live orchestrator as its last heartbeat described it."""

    instance: str
    label: str
    configured: tuple[str, ...]
    held: dict[str, str]  # provider -> epoch tag "term.seq"
    age_s: float  # seconds since the heartbeat, by the server's clock


def _fence(conn: Connection, cluster: str, provider: str, name: str, epoch: Epoch) -> None:
    """Check ``epoch`` against the provider's fence and raise it (inside the caller's transaction)."""
    standalone = standalone_holding(conn, cluster, provider)
    if standalone is not None:
        raise LeaseLost(
            f"provider {provider}: the standalone command {standalone} holds it (the shared store's "
            f"standalone lease); {name} not changed"
        )
    conn.execute(
        "INSERT INTO xceprov.fences (cluster, provider, term, seq) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (cluster, provider, epoch.term, epoch.seq),
    )
    row = conn.execute(
        "SELECT term, seq FROM xceprov.fences WHERE cluster = %s AND provider = %s FOR UPDATE", (cluster, provider)
    ).fetchone()
    assert row is not None  # inserted above when missing; rows are never deleted
    stored = Epoch(int(row[0]), int(row[1]))
    if epoch < stored:
        raise LeaseLost(
            f"provider {provider}: the shared store holds epoch {stored}, newer than this holder's {epoch}; "
            f"{name} not changed (another orchestrator holds the provider now)"
        )
    if epoch > stored:
        conn.execute(
            "UPDATE xceprov.fences SET term = %s, seq = %s, updated_at = clock_timestamp() "
            "WHERE cluster = %s AND provider = %s",
            (epoch.term, epoch.seq, cluster, provider),
        )


def _upsert(conn: Connection, cluster: str, provider: str, name: str, body: bytes, epoch: Epoch | None) -> None:
    """Insert or replace the document's row (inside the caller's transaction)."""
    conn.execute(
        "INSERT INTO xceprov.documents (cluster, provider, name, body, epoch) VALUES (%s, %s, %s, %s, %s) "
        "ON CONFLICT (cluster, provider, name) DO UPDATE "
        "SET body = excluded.body, epoch = excluded.epoch, updated_at = clock_timestamp()",
        (cluster, provider, name, bytes(body), None if epoch is None else epoch.tag()),
    )


class SharedStore:
    """The toolkit's schema ``xceprov`` for one cluster; every method is one bounded round trip
    (or one transaction) and raises ``StoreUnavailable`` when the server fails it."""

    def __init__(self, session: Session, cluster: str) -> None:
        self._session = session
        self.cluster = cluster

    @classmethod
    def open(
        cls, conn_str: str, cluster: str, *, connect_timeout: float = 5.0, statement_timeout: float = STATEMENT_TIMEOUT
    ) -> SharedStore:
        """Connect and migrate (``migrations.py``); ``StoreUnavailable`` when the server cannot be
        reached, ``FinalError`` when its schema is newer than this toolkit knows. Every later
        call is bounded by ``statement_timeout`` (server side) and a little more (client side)."""
        session = Session(conn_str, connect_timeout, statement_timeout)
        try:
            session.run("migrating the schema", migrate)
        except BaseException:
            session.close()
            raise
        return cls(session, cluster)

    def close(self) -> None:
        """Close the connection."""
        self._session.close()

    def ping(self) -> bool:
        """Whether the server answers a trivial query now (connecting again if needed)."""
        try:
            self._session.run("ping", lambda conn: conn.execute("SELECT 1").fetchone())
        except StoreUnavailable:
            return False
        return True

    # -- documents ---------------------------------------------------------------------------

    def read_document(self, provider: str, name: str) -> bytes | None:
        """The body of document ``name`` of ``provider`` (``''``: cluster-wide), None when absent."""

        def work(conn: Connection) -> bytes | None:
            row = conn.execute(
                "SELECT body FROM xceprov.documents WHERE cluster = %s AND provider = %s AND name = %s",
                (self.cluster, provider, name),
            ).fetchone()
            return None if row is None else bytes(row[0])

        return self._session.run(f"reading {name} of provider {provider!r}", work)

    def read_documents(self, provider: str, prefix: str) -> dict[str, bytes]:
        """Every document of ``provider`` whose name starts with ``prefix``: full name -> body."""

        def work(conn: Connection) -> dict[str, bytes]:
            rows = conn.execute(
                "SELECT name, body FROM xceprov.documents "
                "WHERE cluster = %s AND provider = %s AND starts_with(name, %s) ORDER BY name",
                (self.cluster, provider, prefix),
            ).fetchall()
            return {str(name): bytes(body) for name, body in rows}

        return self._session.run(f"reading {prefix}* of provider {provider!r}", work)

    def write_document(self, provider: str, name: str, body: bytes, epoch: Epoch | None) -> None:
        """Store ``body`` as document ``name``, fenced by ``epoch`` (module docstring)."""

        def work(conn: Connection) -> None:
            with conn.transaction():
                if epoch is not None:
                    _fence(conn, self.cluster, provider, name, epoch)
                _upsert(conn, self.cluster, provider, name, body, epoch)

        self._session.run(f"writing {name} of provider {provider!r}", work)

    def update_document(
        self, provider: str, name: str, change: Callable[[bytes | None], bytes | None], epoch: Epoch | None
    ) -> bytes | None:
        """Replace document ``name`` with ``change(body now)`` (None: leave it), fenced by
        ``epoch`` like a write, in turn with every other update of it (module docstring); the
        body after. ``change`` runs inside the transaction: whatever it raises rolls it back."""

        def work(conn: Connection) -> bytes | None:
            with conn.transaction():
                if epoch is not None:
                    _fence(conn, self.cluster, provider, name, epoch)
                turn = advisory_key(f"xceprov/document/{self.cluster}/{provider}/{name}")
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (turn,))
                # Read committed: this statement sees what the previous updater committed.
                row = conn.execute(
                    "SELECT body FROM xceprov.documents WHERE cluster = %s AND provider = %s AND name = %s",
                    (self.cluster, provider, name),
                ).fetchone()
                old = None if row is None else bytes(row[0])
                new = change(old)
                if new is None or new == old:
                    return old
                _upsert(conn, self.cluster, provider, name, new, epoch)
                return new

        return self._session.run(f"updating {name} of provider {provider!r}", work)

    def remove_document(self, provider: str, name: str, epoch: Epoch | None) -> None:
        """Remove document ``name`` (absent is fine), fenced by ``epoch`` like a write."""

        def work(conn: Connection) -> None:
            with conn.transaction():
                if epoch is not None:
                    _fence(conn, self.cluster, provider, name, epoch)
                conn.execute(
                    "DELETE FROM xceprov.documents WHERE cluster = %s AND provider = %s AND name = %s",
                    (self.cluster, provider, name),
                )

        self._session.run(f"removing {name} of provider {provider!r}", work)

    # -- members -----------------------------------------------------------------------------

    def heartbeat(
        self,
        instance: str,
        label: str,
        configured: Sequence[str],
        held: Mapping[str, str],
        live_for: float | None = None,
    ) -> None:
        """Record that ``instance`` is alive now (server clock), configured for ``configured``
        and holding ``held`` (provider -> epoch tag), live for ``live_for`` seconds (its live
        window; None: :data:`~orchestrator.clients.postgres.standalone.DEFAULT_LIVE_FOR`); rows
        long past theirs go (module docstring)."""
        configured_json = json.dumps(sorted(configured))
        held_json = json.dumps(dict(sorted(held.items())))

        def work(conn: Connection) -> None:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO xceprov.members (cluster, instance, label, configured, held, heartbeat_at, live_for) "
                    "VALUES (%s, %s, %s, %s::jsonb, %s::jsonb, clock_timestamp(), %s) "
                    "ON CONFLICT (cluster, instance) DO UPDATE SET label = excluded.label, "
                    "configured = excluded.configured, held = excluded.held, heartbeat_at = excluded.heartbeat_at, "
                    "live_for = excluded.live_for",
                    (self.cluster, instance, label, configured_json, held_json, live_for),
                )
                conn.execute(_EXPIRE_MEMBERS, (self.cluster, instance, DEFAULT_LIVE_FOR, MEMBER_EXPIRY))

        self._session.run(f"heartbeat of {instance}", work)

    def members(self, live_within: float) -> list[Member]:
        """The members whose last heartbeat is younger than ``live_within`` seconds (server
        clock), sorted by instance id."""

        def work(conn: Connection) -> list[Member]:
            rows = conn.execute(
                "SELECT instance, label, configured, held, "
                "extract(epoch FROM clock_timestamp() - heartbeat_at)::float8 FROM xceprov.members "
                "WHERE cluster = %s AND heartbeat_at > clock_timestamp() - make_interval(secs => %s) "
                "ORDER BY instance",
                (self.cluster, float(live_within)),
            ).fetchall()
            return [
                Member(
                    instance=str(instance),
                    label=str(label),
                    configured=tuple(str(p) for p in configured),
                    held={str(p): str(tag) for p, tag in held.items()},
                    age_s=max(0.0, float(age)),
                )
                for instance, label, configured, held, age in rows
            ]

        return self._session.run("reading the members", work)

    def leave(self, instance: str) -> None:
        """Remove ``instance``'s row at once (a clean stop: its providers are dealt out at once),
        and the rows long past their live window (module docstring)."""

        def work(conn: Connection) -> None:
            with conn.transaction():
                conn.execute(
                    "DELETE FROM xceprov.members WHERE cluster = %s AND instance = %s", (self.cluster, instance)
                )
                conn.execute(_EXPIRE_MEMBERS, (self.cluster, instance, DEFAULT_LIVE_FOR, MEMBER_EXPIRY))

        self._session.run(f"leave of {instance}", work)

    # -- the standalone fact journal ---------------------------------------------------------

    def append_facts(self, facts: Sequence[Mapping[str, Any]]) -> None:
        """Append ``facts`` (JSON objects) as one batch: all or none, numbered on from the last."""
        bodies = [json.dumps(dict(fact), sort_keys=True) for fact in facts]
        if not bodies:
            return

        def work(conn: Connection) -> None:
            with conn.transaction():
                # Appenders take turns, so numbers are given in commit order: a reader that saw
                # seq n never misses a smaller one committed later.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key(f"xceprov/facts/{self.cluster}"),))
                row = conn.execute(
                    "SELECT coalesce(max(seq), 0) FROM xceprov.facts WHERE cluster = %s", (self.cluster,)
                ).fetchone()
                last = int(row[0]) if row is not None else 0
                with conn.cursor() as cursor:
                    cursor.executemany(
                        "INSERT INTO xceprov.facts (cluster, seq, body) VALUES (%s, %s, %s::json)",
                        [(self.cluster, last + i, body) for i, body in enumerate(bodies, start=1)],
                    )

        self._session.run(f"appending {len(bodies)} facts", work)

    def facts_since(self, seq: int) -> list[tuple[int, dict[str, Any]]]:
        """The facts numbered after ``seq`` (0: all), in order, as ``(seq, fact)``."""

        def work(conn: Connection) -> list[tuple[int, dict[str, Any]]]:
            rows = conn.execute(
                "SELECT seq, body FROM xceprov.facts WHERE cluster = %s AND seq > %s ORDER BY seq",
                (self.cluster, seq),
            ).fetchall()
            return [(int(number), dict(body)) for number, body in rows]

        return self._session.run(f"reading the facts after {seq}", work)
