"""The simulated cloud's durable store: one SQLite file shared by every process that touches it.

Who writes here at the same time: Terraform runs up to 10 provider calls in parallel (threads of
one provider process), several provider processes may run at once (one per working directory),
and ``xceprov sim fault ...`` injects faults from yet another process. Hence:

- WAL journal, ``busy_timeout``, and ``BEGIN IMMEDIATE`` for every write so that a writer takes
  the lock up front instead of failing half-way on an upgrade from a read lock;
- one row per instance (and one row per tag), short transactions, never a rewrite of the store;
- idempotency by ``client_token`` and address uniqueness are *also* enforced by partial unique
  indexes, so that even a logic slip cannot give two live instances one token or one address;
- fault controls (error rate, capacity, slow launches) live in the same file, so that every
  provider process sees them and they survive restarts;
- the cloud's own maximum lifetime: an instance tagged ``xce:max_lifetime`` (whole seconds) is
  terminated by the cloud itself, reason ``expired``, once ``launch_time`` plus that lifetime has
  passed. Every store operation first sweeps what is due (an indexed read finds nothing in the
  common case; only a due instance takes the write lock), so whoever looks at the cloud, a
  Terraform refresh or the host manager's poll every 0.5 s, sees it gone at its expiry, even if
  no process ran at that moment. The expiry follows the tag as it is now: a tag update moves it;
- the mutation journal: every create, terminate, tag update, stop and start is appended to the
  ``mutations`` table in the transaction that makes it, with the instance's ``xce:cluster`` and
  ``xce:provider`` tags, its client token and the epoch of the caller (the ``fence`` of the
  Terraform run, see ``provider.py``; "" for the cloud's own actions and the ``xceprov sim``
  tooling), so that a test can prove that two orchestrators never mutated one provider at once.

Costs: create, get, delete, tag update, the fault checks and the expiry sweep are O(1)
(indexed) per call, plus O(k) for k instances expiring; listing is O(n) in the instances returned,
reading the journal O(m) in the mutations returned (one append per mutation).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import random
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

from orchestrator.errors import FinalError, RetryableError
from orchestrator.model.tags import CLUSTER as CLUSTER_TAG
from orchestrator.model.tags import MAX_LIFETIME, parse_max_lifetime
from orchestrator.model.tags import PROVIDER as PROVIDER_TAG

State = Literal["running", "stopped", "terminated"]

RUNNING: Final = "running"
STOPPED: Final = "stopped"
TERMINATED: Final = "terminated"

# Reasons recorded when an instance leaves ``running`` (``Instance.state_reason``).
REASON_USER: Final = "user-terminate"
REASON_OUT_OF_BAND: Final = "out-of-band-delete"
REASON_SPOT: Final = "spot-reclaim"
REASON_STOP: Final = "user-stop"
# The cloud ended the instance itself at launch_time + xce:max_lifetime (not a caller's delete).
REASON_EXPIRED: Final = "expired"

# Every address the cloud can hand out lies in 10.213.0.0/16 (stored as an offset from its start).
# The cloud's network (meta key ``network``, set by ``xceprov sim up`` to its lab's subnet; the
# whole /16 when unset) is where it allocates: its first address is the network, the second the
# lab gateway and the last the broadcast address, none of which an instance gets.
NETWORK: Final = ipaddress.IPv4Network("10.213.0.0/16")
_FIRST_OFFSET: Final = 2

_BUSY_TIMEOUT_MS: Final = 60_000
_SCHEMA_VERSION: Final = 4

# Actions of the mutation journal (``Mutation.action``).
ACTION_CREATE: Final = "create"
ACTION_DELETE: Final = "delete"
ACTION_TAGS: Final = "update-tags"
ACTION_STOP: Final = "stop"
ACTION_START: Final = "start"


class CloudError(FinalError):
    """A simulated cloud API call failed in a way retrying will not fix."""


class CloudApiError(RetryableError):
    """An injected, retryable API failure (the simulated ``InternalError``/throttling)."""


class InsufficientCapacity(CloudError):
    """A flavor's capacity limit is reached; the message names the flavor."""


class IdempotentParameterMismatch(CloudError):
    """A create reused a live instance's client token with different name, flavor or image."""


class InstanceNotFound(CloudError):
    """No instance has this id."""


class AddressSpaceExhausted(CloudError):
    """Every address of the cloud's network is held by a live instance."""


class InvalidParameterValue(CloudError):
    """A create or tag update carried a value the cloud refuses (a malformed ``xce:max_lifetime``)."""


@dataclass(frozen=True)
class Instance:
    """One simulated instance as the cloud API reports it."""

    id: str
    name: str
    flavor: str
    image: str
    tags: Mapping[str, str] = field(hash=False)
    user_data: str
    client_token: str
    address: str
    launch_time: str
    state: State
    # Why the instance left ``running`` (``spot-reclaim``, ``out-of-band-delete``...); "" otherwise.
    state_reason: str = ""
    # RFC 3339 time of termination; "" while not terminated. For reason ``expired``: the expiry.
    terminated_at: str = ""
    # RFC 3339 time at which the cloud ends the instance (launch_time + xce:max_lifetime); "" if never.
    expires_at: str = ""
    # Monotonic change counter of the store at this instance's last change (see ``changes_since``).
    version: int = field(default=0, compare=False)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (the shape of ``xceprov sim cloud list --json``)."""
        return {
            "id": self.id,
            "name": self.name,
            "flavor": self.flavor,
            "image": self.image,
            "tags": dict(self.tags),
            "user_data": self.user_data,
            "client_token": self.client_token,
            "address": self.address,
            "launch_time": self.launch_time,
            "state": self.state,
            "state_reason": self.state_reason,
            "terminated_at": self.terminated_at,
            "expires_at": self.expires_at,
        }


@dataclass(frozen=True)
class Mutation:
    """One entry of the mutation journal: who changed which instance, how, under which epoch."""

    seq: int
    at: float
    cluster: str
    provider: str
    action: str
    instance_id: str
    client_token: str
    # The epoch tag (``<term>.<seq>``, ``none`` standalone) of the Terraform run that made the
    # change; "" for the cloud's own actions (expiry, spot reclaim) and the sim tooling.
    epoch: str
    # Why an instance was terminated (``user-terminate``, ``expired``...); "" for other actions.
    reason: str = ""

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (the shape of ``xceprov sim cloud mutations --json``)."""
        return {
            "seq": self.seq,
            "time": rfc3339(self.at),
            "cluster": self.cluster,
            "provider": self.provider,
            "action": self.action,
            "instance_id": self.instance_id,
            "client_token": self.client_token,
            "epoch": self.epoch,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class FaultSettings:
    """The fault controls currently in force."""

    error_rate: float = 0.0
    seed: int | None = None
    slow_launch: float = 0.0
    capacity: Mapping[str, int] = field(default_factory=dict)
    # Probability that a create succeeds in the cloud but its response is lost (the caller sees
    # a retryable error; repeating the create with the same client token returns the instance).
    lost_response: float = 0.0

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (the shape of ``xceprov sim fault show --json``)."""
        return {
            "error_rate": self.error_rate,
            "seed": self.seed,
            "slow_launch": self.slow_launch,
            "capacity": dict(sorted(self.capacity.items())),
            "lost_response": self.lost_response,
        }


def rfc3339_now() -> str:
    """The current UTC time as RFC 3339 with second precision (``2026-01-02T03:04:05Z``)."""
    return rfc3339(time.time())


def rfc3339(timestamp: float) -> str:
    """A Unix time as RFC 3339 UTC with second precision (``2026-01-02T03:04:05Z``)."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expiry_of(launch_time: str, tags: Mapping[str, str]) -> float | None:
    """Unix time at which the cloud ends an instance: launch time + its ``xce:max_lifetime`` tag.

    ``None`` without the tag. A malformed tag raises ``InvalidParameterValue`` (the cloud refuses
    the call, as EC2 refuses a malformed parameter); an unreadable launch time, ``ValueError``.
    """
    value = tags.get(MAX_LIFETIME)
    if value is None:
        return None
    try:
        seconds = parse_max_lifetime(value)
    except ValueError as exc:
        raise InvalidParameterValue(f"InvalidParameterValue: {exc}") from None
    launched = datetime.fromisoformat(launch_time)
    if launched.tzinfo is None:
        launched = launched.replace(tzinfo=UTC)
    return launched.timestamp() + seconds


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
    expires_at    REAL
);
-- Live instances own their token and their address; terminated ones release both.
CREATE UNIQUE INDEX IF NOT EXISTS instances_live_token
    ON instances(client_token) WHERE state != 'terminated' AND client_token != '';
CREATE UNIQUE INDEX IF NOT EXISTS instances_live_addr
    ON instances(addr) WHERE state != 'terminated';
CREATE INDEX IF NOT EXISTS instances_state ON instances(state);
CREATE INDEX IF NOT EXISTS instances_flavor_state ON instances(flavor, state);
CREATE INDEX IF NOT EXISTS instances_version ON instances(version);
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
CREATE TABLE IF NOT EXISTS capacity (
    flavor TEXT PRIMARY KEY,
    max_live INTEGER NOT NULL
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

_COLUMNS: Final = (
    "seq, id, name, flavor, image, user_data, client_token, addr, launch_time, state, "
    "state_reason, terminated_at, version, expires_at"
)
# Created after the schema migration (a version 2 store has no expires_at column before it).
# Partial: the sweep looks only at live instances that can expire, so it stays O(due).
_EXPIRY_INDEX: Final = (
    "CREATE INDEX IF NOT EXISTS instances_live_expiry ON instances(expires_at) "
    "WHERE state != 'terminated' AND expires_at IS NOT NULL"
)


class CloudStore:
    """The simulated cloud: instances, tags, addresses and fault controls in one SQLite file.

    ``api_faults`` decides whether the injected API faults (random error rate, lost create
    responses, slow launches) apply to calls made through this object: the Terraform provider passes ``True``; the
    ``xceprov sim`` tooling and the simulated hosts leave it ``False`` so that inspecting the
    cloud never fails at random. Capacity limits always apply to creates.

    ``clock`` gives the cloud's current Unix time (launch times, terminations, expiry); tests
    pass their own to move time without sleeping.

    One object may be shared by threads; each thread (and each forked process) gets its own
    SQLite connection.
    """

    def __init__(self, path: Path, *, api_faults: bool = False, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.api_faults = api_faults
        self.clock = clock
        self._local = threading.local()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._init_schema()

    # ---------------------------------------------------------------- connections

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        # A connection must not cross a fork: reopen in the child.
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=True
            )
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            # FULL: a create the provider reported to Terraform must survive a power cut too.
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One short write transaction, taking the write lock up front."""
        conn = self._conn()
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # Also after a failed COMMIT: never leave the thread's connection inside a transaction.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: a consistent snapshot across several SELECTs."""
        conn = self._conn()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close this thread's connection (others close when their thread ends)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            conn.close()
        self._local.conn = None

    def _init_schema(self) -> None:
        with self._write() as conn:
            for statement in _split_sql(_SCHEMA):
                conn.execute(statement)
            conn.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?), ('next_addr', ?), "
                "('version', '0'), ('draws', '0')",
                (str(_SCHEMA_VERSION), str(_FIRST_OFFSET)),
            )
            schema = int(self._meta(conn, "schema") or 0)
            if schema < 2:
                # Version 1 stores had no per-flavor counters: derive them once.
                conn.execute("DELETE FROM flavor_live")
                conn.execute(
                    "INSERT INTO flavor_live(flavor, live) SELECT flavor, COUNT(*) FROM instances "
                    "WHERE state != 'terminated' GROUP BY flavor"
                )
            if schema < 3:
                self._add_expiry(conn)
            conn.execute(_EXPIRY_INDEX)
            if schema < _SCHEMA_VERSION:
                self._set_meta(conn, "schema", str(_SCHEMA_VERSION))

    @staticmethod
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

    # ---------------------------------------------------------------- meta helpers

    @staticmethod
    def _meta(conn: sqlite3.Connection, key: str) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def _set_meta(conn: sqlite3.Connection, key: str, value: str | None) -> None:
        if value is None:
            conn.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, value))

    def _journal(self, conn: sqlite3.Connection, action: str, instance_id: str, epoch: str, reason: str = "") -> None:
        """Append one mutation of ``instance_id`` (inside the caller's write transaction)."""
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
                self.clock(),
                str(owner_tags.get(CLUSTER_TAG, "")),
                str(owner_tags.get(PROVIDER_TAG, "")),
                action,
                instance_id,
                "" if token is None else str(token[0]),
                epoch,
                reason,
            ),
        )

    @classmethod
    def _bump_version(cls, conn: sqlite3.Connection) -> int:
        row = conn.execute(
            "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'version' RETURNING value"
        ).fetchone()
        return int(row[0])

    # ---------------------------------------------------------------- API faults

    def _api_call(self, operation: str) -> FaultSettings | None:
        """Apply the injected API faults to one call (only when ``api_faults`` is on).

        Returns the fault settings read for this call (``None`` when faults are off).
        """
        if not self._faults_active():
            return None
        faults = self.faults()
        if operation == "create" and faults.slow_launch > 0:
            time.sleep(faults.slow_launch)
        if faults.error_rate > 0 and self._draw(faults) < faults.error_rate:
            raise CloudApiError(
                f"InternalError: simulated API failure during {operation} (error rate {faults.error_rate:g})",
                delay=0.5,
            )
        return faults

    def _draw(self, faults: FaultSettings) -> float:
        """One uniform draw in [0, 1): seeded and deterministic when the faults carry a seed."""
        if faults.seed is None:
            return random.random()
        # A global draw counter in the store makes the sequence of outcomes a function of the
        # seed alone, whichever process or thread makes the call.
        with self._write() as conn:
            row = conn.execute(
                "UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'draws' RETURNING value"
            ).fetchone()
        return seeded_draw(faults.seed, int(row[0]))

    # ---------------------------------------------------------------- instances

    def create_instance(
        self,
        name: str,
        flavor: str,
        image: str,
        tags: Mapping[str, str],
        user_data: str,
        client_token: str,
        *,
        launch_time: str | None = None,
        epoch: str = "",
    ) -> Instance:
        """Launch an instance, or return the live one already made with this ``client_token``.

        Like AWS ``ClientToken``: a retry with the same non-empty token returns the same
        instance; reusing it with another name, flavor or image raises
        ``IdempotentParameterMismatch``. A terminated instance releases its token.
        Raises ``InsufficientCapacity`` when the flavor's limit is reached and ``CloudApiError``
        for an injected API fault. A launch is journalled under ``epoch`` (a returned existing
        instance is no mutation).
        """
        faults = self._api_call("create")
        when = launch_time or rfc3339(self.clock())
        # Refused before anything is written, as a cloud refuses a malformed parameter.
        expires = expiry_of(when, tags)
        # Due instances go first: they give back their capacity, address and client token.
        self.expire_due()
        with self._write() as conn:
            if client_token:
                existing = conn.execute(
                    f"SELECT {_COLUMNS} FROM instances WHERE client_token = ? AND state != 'terminated'",
                    (client_token,),
                ).fetchone()
                if existing is not None:
                    inst = self._row_to_instance(conn, existing)
                    if (inst.name, inst.flavor, inst.image) != (name, flavor, image):
                        raise IdempotentParameterMismatch(
                            f"IdempotentParameterMismatch: client token {client_token!r} was used for "
                            f"{inst.id} ({inst.name}, {inst.flavor}, {inst.image})"
                        )
                    return inst
            self._check_capacity(conn, flavor)
            addr = self._allocate_address(conn)
            conn.execute(
                "INSERT INTO flavor_live(flavor, live) VALUES (?, 1) ON CONFLICT(flavor) DO UPDATE SET live = live + 1",
                (flavor,),
            )
            version = self._bump_version(conn)
            instance_id = "i-" + secrets.token_hex(6)
            conn.execute(
                "INSERT INTO instances(id, name, flavor, image, user_data, client_token, addr, "
                "launch_time, state, version, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?)",
                (instance_id, name, flavor, image, user_data, client_token, addr, when, version, expires),
            )
            conn.executemany(
                "INSERT INTO tags(instance_id, key, value) VALUES (?, ?, ?)",
                [(instance_id, k, v) for k, v in tags.items()],
            )
            self._journal(conn, ACTION_CREATE, instance_id, epoch)
        if faults is not None and faults.lost_response > 0 and self._draw(faults) < faults.lost_response:
            raise CloudApiError(
                "RequestTimeout: simulated lost response to create (the instance may exist; "
                "repeat the request with the same client token)",
                delay=0.5,
            )
        return Instance(
            id=instance_id,
            name=name,
            flavor=flavor,
            image=image,
            tags=dict(tags),
            user_data=user_data,
            client_token=client_token,
            address=_addr_text(addr),
            launch_time=when,
            state=RUNNING,
            expires_at="" if expires is None else rfc3339(expires),
            version=version,
        )

    def _check_capacity(self, conn: sqlite3.Connection, flavor: str) -> None:
        row = conn.execute("SELECT max_live FROM capacity WHERE flavor = ?", (flavor,)).fetchone()
        if row is None:
            return
        limit = int(row[0])
        live_row = conn.execute("SELECT live FROM flavor_live WHERE flavor = ?", (flavor,)).fetchone()
        if (0 if live_row is None else int(live_row[0])) >= limit:
            raise InsufficientCapacity(f"InsufficientCapacity: flavor {flavor} has no capacity (limit {limit})")

    def _allocate_address(self, conn: sqlite3.Connection) -> int:
        net = _network(self._meta(conn, "network"))
        first, last = _offsets(net)
        # An address given back inside the network first; one a live instance holds again (the
        # network moved away and back) is no longer free.
        for (addr,) in conn.execute(
            "SELECT addr FROM free_addresses WHERE addr BETWEEN ? AND ? ORDER BY addr", (first, last)
        ).fetchall():
            conn.execute("DELETE FROM free_addresses WHERE addr = ?", (addr,))
            if not self._address_live(conn, int(addr)):
                return int(addr)
        nxt = max(int(self._meta(conn, "next_addr") or first), first)
        while nxt <= last and self._address_live(conn, nxt):
            nxt += 1
        if nxt > last:
            raise AddressSpaceExhausted(f"AddressLimitExceeded: every address of {net} is in use")
        self._set_meta(conn, "next_addr", str(nxt + 1))
        conn.execute("DELETE FROM free_addresses WHERE addr = ?", (nxt,))
        return nxt

    @staticmethod
    def _address_live(conn: sqlite3.Connection, addr: int) -> bool:
        return (
            conn.execute("SELECT 1 FROM instances WHERE addr = ? AND state != 'terminated'", (addr,)).fetchone()
            is not None
        )

    def network(self) -> ipaddress.IPv4Network:
        """The network new instances get their addresses from."""
        with self._read() as conn:
            return _network(self._meta(conn, "network"))

    def set_network(self, network: ipaddress.IPv4Network) -> None:
        """Hand out new addresses inside ``network`` (a /16 to a /29 of 10.213.0.0/16): the lab of
        the world this cloud belongs to. Live instances keep theirs; a changed network starts its
        allocation from its own bottom."""
        if not network.subnet_of(NETWORK) or network.prefixlen > 29:
            raise InvalidParameterValue(
                f"InvalidParameterValue: network {network} must lie inside {NETWORK} (a /16 to a /29)"
            )
        with self._write() as conn:
            if _network(self._meta(conn, "network")) != network:
                self._set_meta(conn, "network", str(network))
                self._set_meta(conn, "next_addr", str(_offsets(network)[0]))

    def get(self, instance_id: str) -> Instance | None:
        """The instance with this id (terminated ones included), or ``None`` if there is none."""
        self._api_call("read")
        self.expire_due()
        with self._read() as conn:
            row = conn.execute(f"SELECT {_COLUMNS} FROM instances WHERE id = ?", (instance_id,)).fetchone()
            return None if row is None else self._row_to_instance(conn, row)

    def delete(self, instance_id: str, *, reason: str = REASON_USER, epoch: str = "") -> bool:
        """Terminate an instance (journalled under ``epoch``). Idempotent: ``False`` if it was
        already terminated or never existed."""
        self._api_call("delete")
        return self._terminate(instance_id, reason, epoch)

    def _terminate(self, instance_id: str, reason: str, epoch: str = "") -> bool:
        # An instance already past its expiry was ended by the cloud, not by this call.
        self.expire_due()
        with self._write() as conn:
            row = conn.execute(
                "SELECT addr, flavor FROM instances WHERE id = ? AND state != 'terminated'", (instance_id,)
            ).fetchone()
            if row is None:
                return False
            self._mark_terminated(conn, instance_id, int(row[0]), str(row[1]), reason, rfc3339(self.clock()), epoch)
            return True

    def expire_due(self) -> list[Instance]:
        """Terminate every live instance past its expiry, reason ``expired``; returns them.

        The cloud's own action (no injected API fault applies), run first by every instance
        operation of the store, so nobody ever sees an instance alive past its expiry.
        ``terminated_at`` is the expiry itself, whenever the sweep ran. Nothing due (the usual
        case) costs one indexed read and takes no write lock.
        """
        now = self.clock()
        with self._read() as conn:
            due = conn.execute(_DUE + " LIMIT 1", (now,)).fetchone()
        if due is None:
            return []
        with self._write() as conn:
            start = int(self._meta(conn, "version") or 0)
            # Read again under the write lock: another process may have swept them meanwhile.
            for rid, addr, flavor, expires in conn.execute(_DUE, (now,)).fetchall():
                self._mark_terminated(conn, str(rid), int(addr), str(flavor), REASON_EXPIRED, rfc3339(float(expires)))
            return self._select(conn, "i.version > ?", [start], order="i.version")

    def _mark_terminated(
        self,
        conn: sqlite3.Connection,
        instance_id: str,
        addr: int,
        flavor: str,
        reason: str,
        when: str,
        epoch: str = "",
    ) -> None:
        """Terminate one live instance inside the caller's write transaction; frees address and
        capacity; journalled under ``epoch`` ("" for the cloud's own terminations)."""
        version = self._bump_version(conn)
        conn.execute(
            "UPDATE instances SET state = 'terminated', state_reason = ?, terminated_at = ?, version = ? WHERE id = ?",
            (reason, when, version, instance_id),
        )
        conn.execute("INSERT OR IGNORE INTO free_addresses(addr) VALUES (?)", (addr,))
        conn.execute("UPDATE flavor_live SET live = live - 1 WHERE flavor = ?", (flavor,))
        self._journal(conn, ACTION_DELETE, instance_id, epoch, reason)

    def update_tags(self, instance_id: str, tags: Mapping[str, str], *, epoch: str = "") -> Instance:
        """Replace the tags of a live instance (the whole map, like Terraform's ``tags``);
        journalled under ``epoch``.

        A changed ``xce:max_lifetime`` moves the expiry (from the launch time, not from now); one
        already past ends the instance at the next operation.
        """
        self.expire_due()
        with self._write() as conn:
            row = conn.execute("SELECT state, launch_time FROM instances WHERE id = ?", (instance_id,)).fetchone()
            if row is None or row[0] == TERMINATED:
                raise InstanceNotFound(f"InvalidInstanceID.NotFound: no live instance {instance_id}")
            expires = expiry_of(str(row[1]), tags)
            version = self._bump_version(conn)
            conn.execute(
                "UPDATE instances SET version = ?, expires_at = ? WHERE id = ?", (version, expires, instance_id)
            )
            conn.execute("DELETE FROM tags WHERE instance_id = ?", (instance_id,))
            conn.executemany(
                "INSERT INTO tags(instance_id, key, value) VALUES (?, ?, ?)",
                [(instance_id, k, v) for k, v in tags.items()],
            )
            self._journal(conn, ACTION_TAGS, instance_id, epoch)
            full = conn.execute(f"SELECT {_COLUMNS} FROM instances WHERE id = ?", (instance_id,)).fetchone()
            return self._row_to_instance(conn, full)

    def stop(self, instance_id: str, *, epoch: str = "") -> Instance:
        """Stop a running instance (it keeps its address; ``start`` brings it back)."""
        return self._set_run_state(instance_id, RUNNING, STOPPED, REASON_STOP, epoch)

    def start(self, instance_id: str, *, epoch: str = "") -> Instance:
        """Start a stopped instance."""
        return self._set_run_state(instance_id, STOPPED, RUNNING, "", epoch)

    def _set_run_state(self, instance_id: str, before: str, after: str, reason: str, epoch: str) -> Instance:
        self.expire_due()
        with self._write() as conn:
            row = conn.execute("SELECT state FROM instances WHERE id = ?", (instance_id,)).fetchone()
            if row is None or row[0] == TERMINATED:
                raise InstanceNotFound(f"InvalidInstanceID.NotFound: no live instance {instance_id}")
            if row[0] == before:
                version = self._bump_version(conn)
                conn.execute(
                    "UPDATE instances SET state = ?, state_reason = ?, version = ? WHERE id = ?",
                    (after, reason, version, instance_id),
                )
                self._journal(conn, ACTION_STOP if after == STOPPED else ACTION_START, instance_id, epoch)
            full = conn.execute(f"SELECT {_COLUMNS} FROM instances WHERE id = ?", (instance_id,)).fetchone()
            return self._row_to_instance(conn, full)

    def list_instances(
        self, tag_filter: Mapping[str, str] | None = None, include_terminated: bool = False
    ) -> list[Instance]:
        """Instances whose tags contain every pair of ``tag_filter``, oldest first."""
        self._api_call("read")
        self.expire_due()
        where, params = _where(tag_filter, include_terminated)
        with self._read() as conn:
            return self._select(conn, where, params)

    def mutations(self, since: int = 0, provider: str | None = None) -> list[Mutation]:
        """The mutation journal after sequence ``since``, in commit order (of one ``provider``
        when given). Read-only: no expiry sweep runs first, so reading never adds an entry."""
        where = "seq > ?"
        params: list[object] = [since]
        if provider is not None:
            where += " AND provider = ?"
            params.append(provider)
        with self._read() as conn:
            rows = conn.execute(
                "SELECT seq, at, cluster, provider, action, instance_id, client_token, epoch, reason "
                f"FROM mutations WHERE {where} ORDER BY seq",
                params,
            ).fetchall()
        return [Mutation(int(r[0]), float(r[1]), *(str(v) for v in r[2:])) for r in rows]

    def changes_since(self, version: int) -> tuple[int, list[Instance]]:
        """Instances changed after store version ``version`` (terminated included) and the current version.

        A watcher (the simulated hosts) polls this with the version it got last time and so
        sees every launch, tag change and termination exactly once, at O(changes) cost.
        """
        self.expire_due()
        with self._read() as conn:
            current = int(self._meta(conn, "version") or 0)
            changed = self._select(conn, "i.version > ?", [version], order="i.version")
            return current, changed

    def _select(
        self, conn: sqlite3.Connection, where: str, params: list[object], order: str = "i.seq"
    ) -> list[Instance]:
        rows = conn.execute(
            f"SELECT {', '.join('i.' + c.strip() for c in _COLUMNS.split(','))} FROM instances i "
            f"WHERE {where} ORDER BY {order}",
            params,
        ).fetchall()
        tags: dict[str, dict[str, str]] = {}
        for instance_id, key, value in conn.execute(
            f"SELECT t.instance_id, t.key, t.value FROM tags t JOIN instances i ON i.id = t.instance_id WHERE {where}",
            params,
        ):
            tags.setdefault(instance_id, {})[key] = value
        return [_instance(row, tags.get(row[1], {})) for row in rows]

    @staticmethod
    def _row_to_instance(conn: sqlite3.Connection, row: tuple[object, ...]) -> Instance:
        tags = {str(k): str(v) for k, v in conn.execute("SELECT key, value FROM tags WHERE instance_id = ?", (row[1],))}
        return _instance(row, tags)

    # ---------------------------------------------------------------- fault controls

    def faults(self) -> FaultSettings:
        """The fault controls currently in force."""
        with self._read() as conn:
            meta = dict(
                conn.execute(
                    "SELECT key, value FROM meta WHERE key IN ('error_rate', 'seed', 'slow_launch', 'lost_response')"
                ).fetchall()
            )
            capacity = {str(f): int(n) for f, n in conn.execute("SELECT flavor, max_live FROM capacity")}
        seed = meta.get("seed")
        return FaultSettings(
            error_rate=float(meta.get("error_rate", 0.0)),
            seed=None if seed is None else int(seed),
            slow_launch=float(meta.get("slow_launch", 0.0)),
            lost_response=float(meta.get("lost_response", 0.0)),
            capacity=capacity,
        )

    def set_error_rate(self, rate: float, seed: int | None = None) -> None:
        """Make each create/read/delete fail with a retryable API error with probability ``rate``.

        With a ``seed`` the sequence of outcomes is deterministic (the draw counter restarts).
        """
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"error rate must be between 0 and 1, not {rate}")
        with self._write() as conn:
            self._set_meta(conn, "error_rate", repr(float(rate)))
            self._set_meta(conn, "seed", None if seed is None else str(int(seed)))
            self._set_meta(conn, "draws", "0")

    def set_capacity(self, flavor: str, limit: int | None) -> None:
        """Allow at most ``limit`` live instances of ``flavor``; ``None`` removes the limit."""
        if limit is not None and limit < 0:
            raise ValueError(f"capacity must be 0 or more, not {limit}")
        with self._write() as conn:
            if limit is None:
                conn.execute("DELETE FROM capacity WHERE flavor = ?", (flavor,))
            else:
                conn.execute("INSERT OR REPLACE INTO capacity(flavor, max_live) VALUES (?, ?)", (flavor, int(limit)))

    def set_lost_response(self, rate: float) -> None:
        """Make each API create, with probability ``rate``, succeed but raise a retryable error.

        This is the crash between the cloud call and Terraform's state write: the instance
        exists, Terraform does not know it, and only the client token prevents a twin on retry.
        Uses the error rate's seed, if any.
        """
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"lost response rate must be between 0 and 1, not {rate}")
        with self._write() as conn:
            self._set_meta(conn, "lost_response", repr(float(rate)))

    def set_slow_launch(self, seconds: float) -> None:
        """Add ``seconds`` to every create made through the API (0 turns it off)."""
        if seconds < 0:
            raise ValueError(f"slow launch must be 0 seconds or more, not {seconds}")
        with self._write() as conn:
            self._set_meta(conn, "slow_launch", repr(float(seconds)))

    def clear_faults(self) -> None:
        """Remove every fault control (error rate, seed, slow launches, capacity limits)."""
        with self._write() as conn:
            for key in ("error_rate", "seed", "slow_launch", "lost_response"):
                self._set_meta(conn, key, None)
            self._set_meta(conn, "draws", "0")
            conn.execute("DELETE FROM capacity")

    def delete_out_of_band(self, instance_id: str) -> Instance:
        """Terminate an instance behind Terraform's back (reason ``out-of-band-delete``)."""
        if not self._terminate(instance_id, REASON_OUT_OF_BAND):
            inst = self.get_unfaulted(instance_id)
            if inst is None:
                raise InstanceNotFound(f"InvalidInstanceID.NotFound: no instance {instance_id}")
        inst = self.get_unfaulted(instance_id)
        assert inst is not None
        return inst

    def create_out_of_band(
        self,
        name: str,
        flavor: str,
        image: str,
        tags: Mapping[str, str],
        *,
        user_data: str = "",
        launch_time: str | None = None,
    ) -> Instance:
        """Launch an instance Terraform never made (no client token); capacity limits still apply."""
        with self._no_api_faults():
            return self.create_instance(name, flavor, image, tags, user_data, "", launch_time=launch_time)

    def spot_reclaim(self, *, instance_id: str | None = None, flavor: str | None = None) -> list[Instance]:
        """Terminate running instances of ``flavor`` (or the one ``instance_id``), reason ``spot-reclaim``.

        Returns the instances reclaimed (an empty list when none was running).
        """
        if (instance_id is None) == (flavor is None):
            raise ValueError("spot reclaim needs exactly one of an instance id or a flavor")
        self.expire_due()
        with self._write() as conn:
            if instance_id is not None:
                rows = conn.execute(
                    "SELECT id, addr, flavor FROM instances WHERE id = ? AND state = 'running'",
                    (instance_id,),
                ).fetchall()
            else:
                rows = conn.execute(
                    "SELECT id, addr, flavor FROM instances WHERE flavor = ? AND state = 'running'", (flavor,)
                ).fetchall()
            now = rfc3339(self.clock())
            for rid, addr, rflavor in rows:
                self._mark_terminated(conn, str(rid), int(addr), str(rflavor), REASON_SPOT, now)
        out = [self.get_unfaulted(rid) for rid, _, _ in rows]
        return [i for i in out if i is not None]

    def get_unfaulted(self, instance_id: str) -> Instance | None:
        """``get`` without injected API faults (for tooling)."""
        with self._no_api_faults():
            return self.get(instance_id)

    @contextlib.contextmanager
    def _no_api_faults(self) -> Iterator[None]:
        # Per-thread override so that tooling calls never draw from the error rate.
        previous = getattr(self._local, "suppress", False)
        self._local.suppress = True
        try:
            yield
        finally:
            self._local.suppress = previous

    def _faults_active(self) -> bool:
        return self.api_faults and not getattr(self._local, "suppress", False)


def seeded_draw(seed: int, n: int) -> float:
    """The ``n``-th uniform draw in [0, 1) of the sequence named by ``seed`` (deterministic)."""
    digest = hashlib.sha256(f"{seed}:{n}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _where(tag_filter: Mapping[str, str] | None, include_terminated: bool) -> tuple[str, list[object]]:
    clauses: list[str] = []
    params: list[object] = []
    if not include_terminated:
        clauses.append("i.state != 'terminated'")
    for key, value in (tag_filter or {}).items():
        clauses.append("EXISTS (SELECT 1 FROM tags f WHERE f.instance_id = i.id AND f.key = ? AND f.value = ?)")
        params.extend((key, value))
    return (" AND ".join(clauses) or "1"), params


def _network(text: str | None) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(text) if text else NETWORK


def _offsets(net: ipaddress.IPv4Network) -> tuple[int, int]:
    """The first and last offset (from 10.213.0.0) an instance may get inside ``net``."""
    base = int(net.network_address) - int(NETWORK.network_address)
    return base + _FIRST_OFFSET, base + net.num_addresses - 2


def _addr_text(offset: int) -> str:
    return str(NETWORK.network_address + offset)


def _instance(row: tuple[object, ...], tags: Mapping[str, str]) -> Instance:
    (_seq, iid, name, flavor, image, user_data, token, addr, launch, state, reason, term_at, version, expires) = row
    return Instance(
        id=str(iid),
        name=str(name),
        flavor=str(flavor),
        image=str(image),
        tags=dict(tags),
        user_data=str(user_data),
        client_token=str(token),
        address=_addr_text(int(addr)),  # type: ignore[call-overload]
        launch_time=str(launch),
        state=str(state),  # type: ignore[arg-type]
        state_reason=str(reason),
        terminated_at=str(term_at),
        expires_at="" if expires is None else rfc3339(float(expires)),  # type: ignore[arg-type]
        version=int(version),  # type: ignore[call-overload]
    )


# Live instances past their expiry at a given Unix time (uses the partial index instances_live_expiry).
_DUE: Final = (
    "SELECT id, addr, flavor, expires_at FROM instances "
    "WHERE state != 'terminated' AND expires_at IS NOT NULL AND expires_at <= ? ORDER BY expires_at"
)


def _split_sql(script: str) -> list[str]:
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


__all__ = [
    "REASON_EXPIRED",
    "RUNNING",
    "STOPPED",
    "TERMINATED",
    "AddressSpaceExhausted",
    "CloudApiError",
    "CloudError",
    "CloudStore",
    "FaultSettings",
    "IdempotentParameterMismatch",
    "Instance",
    "InstanceNotFound",
    "InsufficientCapacity",
    "InvalidParameterValue",
    "Mutation",
]
