"""The simulated controller's durable state: facts, host records and decommissioned hosts in
SQLite, the term (and when it started) in a file.

SQLite runs in WAL mode with ``synchronous=FULL`` so a commit is on disk before the fact is
acknowledged (and a join before the worker's ``joined`` reply). The term file is written to a
temporary file, fsync'd, renamed over the old one and the directory fsync'd, so a term once used
is never handed out again after a crash.

Host records are not facts: a fact is a provisioner's statement, fenced by its lease epoch; a
join or a close is what the controller itself observed or was asked to do to a host. They are
kept per expected-host record, keyed by the ``factId`` of the ``expectedHost`` fact that made
the record, so a restarted controller that rebuilds its records from the facts finds them again.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.model.facts import FactKind

_SCHEMA = """
CREATE TABLE IF NOT EXISTS facts (
    fact_id INTEGER PRIMARY KEY AUTOINCREMENT,
    provider TEXT NOT NULL,
    kind TEXT NOT NULL,
    op_id TEXT NOT NULL,
    term INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    holder TEXT NOT NULL,
    instance_key TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    template TEXT NOT NULL,
    host_name TEXT NOT NULL,
    address TEXT NOT NULL,
    count INTEGER NOT NULL,
    join_deadline_ms INTEGER NOT NULL,
    detail TEXT NOT NULL,
    committed_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS facts_provider ON facts (provider, fact_id);
CREATE INDEX IF NOT EXISTS facts_dedup ON facts (provider, kind, op_id, instance_key, instance_id);
CREATE TABLE IF NOT EXISTS host_records (
    record_fact_id INTEGER PRIMARY KEY,
    provider TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    host_name TEXT NOT NULL,
    joined_ms INTEGER NOT NULL,
    closed_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS decommissioned (
    host_name TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    time_ms INTEGER NOT NULL,
    PRIMARY KEY (host_name, instance_id)
);
CREATE TABLE IF NOT EXISTS join_bindings (
    instance_key TEXT NOT NULL,
    host_name TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    expires_ms INTEGER NOT NULL,
    used_ms INTEGER NOT NULL,
    PRIMARY KEY (instance_key, host_name)
);
"""

_COLUMNS = (
    "fact_id, provider, kind, op_id, term, seq, holder, instance_key, instance_id, template, "
    "host_name, address, count, join_deadline_ms, detail, committed_ms"
)


@dataclass(frozen=True)
class FactRecord:
    """One fact, as committed (``fact_id``, ``committed_ms``, ``holder`` set by the controller)."""

    kind: FactKind
    provider: str
    op_id: str
    term: int
    seq: int
    instance_key: str = ""
    instance_id: str = ""
    template: str = ""
    host_name: str = ""
    address: str = ""
    count: int = 0
    join_deadline_ms: int = 0
    detail: str = ""
    fact_id: int = 0
    committed_ms: int = 0
    holder: str = ""


@dataclass(frozen=True)
class HostRecord:
    """What the controller durably knows of an expected-host record beyond its facts.

    ``joined_ms``: the first join (0: never joined); ``closed_ms``: when it was closed (0: open).
    ``instance_id`` and ``host_name`` are the ones the worker last joined with, which may fill in
    what the fact left empty.
    """

    record_fact_id: int
    provider: str
    instance_id: str = ""
    host_name: str = ""
    joined_ms: int = 0
    closed_ms: int = 0


@dataclass(frozen=True)
class JoinBinding:
    """The first join a host's join token admitted: who used it (docs/protocol.md,
    "Authentication and roles"). ``expires_ms``: the latest expiry of a token that joined."""

    instance_key: str
    host_name: str
    instance_id: str
    expires_ms: int
    used_ms: int


@dataclass(frozen=True)
class TermRecord:
    """The durable term and the wall-clock time (unix ms) it started (0: not recorded)."""

    term: int
    started_ms: int


def _row_to_fact(row: tuple[object, ...]) -> FactRecord:
    (
        fid,
        provider,
        kind,
        op_id,
        term,
        seq,
        holder,
        ikey,
        iid,
        tmpl,
        host,
        addr,
        count,
        deadline,
        detail,
        cms,
    ) = row
    return FactRecord(
        kind=FactKind(str(kind)), provider=str(provider), op_id=str(op_id), term=int(str(term)), seq=int(str(seq)),
        instance_key=str(ikey), instance_id=str(iid), template=str(tmpl), host_name=str(host),
        address=str(addr), count=int(str(count)), join_deadline_ms=int(str(deadline)), detail=str(detail),
        fact_id=int(str(fid)), committed_ms=int(str(cms)), holder=str(holder),
    )  # fmt: skip


class ControllerStore:
    """Facts, decommissioned hosts and the term under one state directory. Thread-safe."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        self.db_path = state_dir / "controller.sqlite"
        self.term_path = state_dir / "controller.term"
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.db_path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    # -- term ------------------------------------------------------------------------------

    def read_term_record(self) -> TermRecord:
        """The last durable term and its start ((0, 0) when none was ever written).

        The file holds ``<term> <started unix ms>``; a file of an earlier version holds the term
        alone (its start is then unknown: 0).
        """
        try:
            words = self.term_path.read_text().split()
        except FileNotFoundError:
            return TermRecord(0, 0)
        term = int(words[0]) if words else 0
        return TermRecord(term, int(words[1]) if len(words) > 1 else 0)

    def read_term(self) -> int:
        """The last durable term (0 when none was ever written)."""
        return self.read_term_record().term

    def bump_term(self, started_ms: int = 0) -> int:
        """Durably write term + 1 with its start time and return it (before it is used for anything)."""
        with self._lock:
            term = self.read_term() + 1
            tmp = self.term_path.with_name(f".{self.term_path.name}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, f"{term} {started_ms}\n".encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.term_path)
            dfd = os.open(self.state_dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
            return term

    # -- facts -----------------------------------------------------------------------------

    def commit_fact(self, fact: FactRecord) -> tuple[FactRecord, bool]:
        """Commit ``fact`` durably; returns ``(committed, new)``.

        A fact equal in (provider, kind, op_id, instance_key, instance_id) to a committed one is
        not stored again: the existing record comes back with ``new=False`` (retries are safe).
        """
        with self._lock:
            return self._commit_one(fact)

    def commit_facts(self, facts: list[FactRecord]) -> list[tuple[FactRecord, bool]]:
        """Commit ``facts`` in one transaction (one durable write): all of them or, on any
        error, none. Each comes back as :meth:`commit_fact` returns it, in order; a fact equal
        to one before it in the same batch is the earlier one's record (``new=False``)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                out = [self._commit_one(fact) for fact in facts]
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return out

    def _commit_one(self, fact: FactRecord) -> tuple[FactRecord, bool]:
        row = self._db.execute(
            f"SELECT {_COLUMNS} FROM facts WHERE provider=? AND kind=? AND op_id=? AND instance_key=? "
            "AND instance_id=? ORDER BY fact_id LIMIT 1",
            (fact.provider, fact.kind, fact.op_id, fact.instance_key, fact.instance_id),
        ).fetchone()
        if row is not None:
            return _row_to_fact(row), False
        cur = self._db.execute(
            "INSERT INTO facts (provider, kind, op_id, term, seq, holder, instance_key, instance_id, "
            "template, host_name, address, count, join_deadline_ms, detail, committed_ms) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                fact.provider, fact.kind, fact.op_id, fact.term, fact.seq, fact.holder,
                fact.instance_key, fact.instance_id, fact.template, fact.host_name, fact.address,
                fact.count, fact.join_deadline_ms, fact.detail, fact.committed_ms,
            ),
        )  # fmt: skip
        return replace(fact, fact_id=int(cur.lastrowid or 0)), True

    def facts(self, provider: str, after: int = 0, limit: int = 1000) -> list[FactRecord]:
        """Facts of ``provider`` with ``fact_id > after``, in order, at most ``limit``."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM facts WHERE provider=? AND fact_id>? ORDER BY fact_id LIMIT ?",
                (provider, after, limit),
            ).fetchall()
        return [_row_to_fact(r) for r in rows]

    def all_facts(self) -> list[FactRecord]:
        """Every fact, in order (used to rebuild expected hosts at start)."""
        with self._lock:
            rows = self._db.execute(f"SELECT {_COLUMNS} FROM facts ORDER BY fact_id").fetchall()
        return [_row_to_fact(r) for r in rows]

    def last_holder(self, provider: str) -> str:
        """The holder recorded on the provider's latest committed fact ("" when it has none)."""
        with self._lock:
            row = self._db.execute(
                "SELECT holder FROM facts WHERE provider=? ORDER BY fact_id DESC LIMIT 1", (provider,)
            ).fetchone()
        return str(row[0]) if row else ""

    # -- host records ----------------------------------------------------------------------

    def record_join(self, record_fact_id: int, provider: str, instance_id: str, host_name: str, time_ms: int) -> None:
        """Durably note that a worker joined the record (the first join's time is kept)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO host_records (record_fact_id, provider, instance_id, host_name, joined_ms, closed_ms) "
                "VALUES (?,?,?,?,?,0) ON CONFLICT (record_fact_id) DO UPDATE SET "
                "instance_id=excluded.instance_id, host_name=excluded.host_name, "
                "joined_ms=CASE WHEN joined_ms=0 THEN excluded.joined_ms ELSE joined_ms END",
                (record_fact_id, provider, instance_id, host_name, time_ms),
            )

    def record_close(self, record_fact_id: int, provider: str, time_ms: int) -> None:
        """Durably note that the record was closed (no new work, across restarts too)."""
        with self._lock:
            self._db.execute(
                "INSERT INTO host_records (record_fact_id, provider, instance_id, host_name, joined_ms, closed_ms) "
                "VALUES (?,?,'','',0,?) ON CONFLICT (record_fact_id) DO UPDATE SET "
                "closed_ms=CASE WHEN closed_ms=0 THEN excluded.closed_ms ELSE closed_ms END",
                (record_fact_id, provider, time_ms),
            )

    def forget_record(self, record_fact_id: int) -> None:
        """Drop a record's durable state (its instance was returned or lost)."""
        with self._lock:
            self._db.execute("DELETE FROM host_records WHERE record_fact_id=?", (record_fact_id,))

    def host_records(self) -> dict[int, HostRecord]:
        """Every host record, by the ``factId`` of the ``expectedHost`` fact that made it."""
        with self._lock:
            rows = self._db.execute(
                "SELECT record_fact_id, provider, instance_id, host_name, joined_ms, closed_ms FROM host_records"
            ).fetchall()
        return {int(r[0]): HostRecord(int(r[0]), str(r[1]), str(r[2]), str(r[3]), int(r[4]), int(r[5])) for r in rows}

    # -- join tokens: the first join of each host identity -----------------------------------

    def join_binding(self, instance_key: str, host_name: str) -> JoinBinding | None:
        """The first join recorded for ``(instance_key, host_name)`` (``None``: never joined with a token)."""
        with self._lock:
            row = self._db.execute(
                "SELECT instance_id, expires_ms, used_ms FROM join_bindings WHERE instance_key=? AND host_name=?",
                (instance_key, host_name),
            ).fetchone()
        if row is None:
            return None
        return JoinBinding(instance_key, host_name, str(row[0]), int(row[1]), int(row[2]))

    def bind_join(self, binding: JoinBinding) -> None:
        """Durably record a token's join (before the worker's ``joined`` reply); a later token of
        the same host only moves the expiry forward, never the instance id it is bound to."""
        with self._lock:
            self._db.execute(
                "INSERT INTO join_bindings (instance_key, host_name, instance_id, expires_ms, used_ms) "
                "VALUES (?,?,?,?,?) ON CONFLICT (instance_key, host_name) DO UPDATE SET "
                "expires_ms=MAX(expires_ms, excluded.expires_ms)",
                (binding.instance_key, binding.host_name, binding.instance_id, binding.expires_ms, binding.used_ms),
            )

    def prune_join_bindings(self, now_ms: int, live_keys: set[str]) -> int:
        """Forget the joins of expired tokens whose host has no record any more (returned, lost,
        never recorded): such a token is refused as expired anyway. Returns how many went."""
        with self._lock:
            rows = self._db.execute(
                "SELECT instance_key, host_name FROM join_bindings WHERE expires_ms<=?", (now_ms,)
            ).fetchall()
            gone = [(str(k), str(h)) for k, h in rows if not k or str(k) not in live_keys]
            self._db.executemany("DELETE FROM join_bindings WHERE instance_key=? AND host_name=?", gone)
        return len(gone)

    # -- decommissioned hosts --------------------------------------------------------------

    def add_decommissioned(self, host_name: str, instance_id: str, time_ms: int) -> None:
        """Remember that a host was decommissioned (its rejoin is refused from now on)."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO decommissioned (host_name, instance_id, time_ms) VALUES (?,?,?)",
                (host_name, instance_id, time_ms),
            )

    def is_decommissioned(self, host_name: str, instance_id: str) -> bool:
        """Whether a host with this instance id (when set) or host name was decommissioned."""
        with self._lock:
            if instance_id:
                row = self._db.execute(
                    "SELECT 1 FROM decommissioned WHERE instance_id=? LIMIT 1", (instance_id,)
                ).fetchone()
                if row is not None:
                    return True
            row = self._db.execute(
                "SELECT 1 FROM decommissioned WHERE host_name=? AND host_name<>'' LIMIT 1", (host_name,)
            ).fetchone()
            return row is not None
