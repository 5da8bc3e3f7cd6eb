"""The cloud's fault controls: error rate, lost create responses, slow launches, capacity limits
per flavor (in every zone together, or in one zone) and the account's quota of live instances.

They live in the store's file (``meta`` and ``capacity``), so that every provider process sees
them and they survive restarts. The injected API faults apply only to calls made with
``api_faults`` on (the Terraform provider); capacity limits and the quota always apply to
creates. Live means not terminated: a stopped instance keeps its capacity and counts to the quota.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.sim.cloud.db import Database, increment, set_meta
from orchestrator.sim.cloud.errors import CloudApiError, InstanceLimitExceeded, InsufficientCapacity


@dataclass(frozen=True)
class FaultSettings:
    """The fault controls currently in force."""

    error_rate: float = 0.0
    seed: int | None = None
    slow_launch: float = 0.0
    # Live instances allowed per flavor, in every zone together.
    capacity: Mapping[str, int] = field(default_factory=dict)
    # Live instances allowed per (flavor, zone), in that zone.
    zone_capacity: Mapping[tuple[str, str], int] = field(default_factory=dict)
    # The most live instances the account may run, every flavor and zone (None: no quota).
    quota: int | None = None
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
            "zone_capacity": [{"flavor": f, "zone": z, "limit": n} for (f, z), n in sorted(self.zone_capacity.items())],
            "quota": self.quota,
            "lost_response": self.lost_response,
        }


def api_call(db: Database, operation: str) -> FaultSettings:
    """Apply the injected API faults to one call; returns the fault settings read for it."""
    faults = read_faults(db)
    # A start boots the instance again, like a launch (the warm pool's start ops are slowed too).
    if operation in ("create", "start") and faults.slow_launch > 0:
        time.sleep(faults.slow_launch)
    if faults.error_rate > 0 and draw(db, faults) < faults.error_rate:
        raise CloudApiError(
            f"InternalError: simulated API failure during {operation} (error rate {faults.error_rate:g})",
            delay=0.5,
        )
    return faults


def draw(db: Database, faults: FaultSettings) -> float:
    """One uniform draw in [0, 1): seeded and deterministic when the faults carry a seed."""
    if faults.seed is None:
        return random.random()
    # A global draw counter in the store makes the sequence of outcomes a function of the
    # seed alone, whichever process or thread makes the call.
    with db.write() as conn:
        n = increment(conn, "draws")
    return seeded_draw(faults.seed, n)


def seeded_draw(seed: int, n: int) -> float:
    """The ``n``-th uniform draw in [0, 1) of the sequence named by ``seed`` (deterministic)."""
    digest = hashlib.sha256(f"{seed}:{n}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def check_quota(conn: sqlite3.Connection) -> None:
    """``InstanceLimitExceeded`` when the account's live instances reach its quota (O(flavors))."""
    row = conn.execute("SELECT value FROM meta WHERE key = 'quota'").fetchone()
    if row is None:
        return
    quota = int(row[0])
    live = int(conn.execute("SELECT COALESCE(SUM(live), 0) FROM flavor_live").fetchone()[0])
    if live >= quota:
        raise InstanceLimitExceeded(
            f"InstanceLimitExceeded: the account may run at most {quota} instances ({live} live)"
        )


def check_capacity(conn: sqlite3.Connection, flavor: str, zone: str = "") -> None:
    """``InsufficientCapacity`` when ``flavor``'s live instances reach its limit in every zone
    together, or (``zone`` set) those in ``zone`` reach the zone's limit. The message names the
    flavor and the zone the create asked for."""
    where = f"flavor {flavor}" + (f" in zone {zone}" if zone else "")
    row = conn.execute("SELECT max_live FROM capacity WHERE flavor = ? AND zone = ''", (flavor,)).fetchone()
    if row is not None:
        live_row = conn.execute("SELECT live FROM flavor_live WHERE flavor = ?", (flavor,)).fetchone()
        if (0 if live_row is None else int(live_row[0])) >= int(row[0]):
            every = ", every zone" if zone else ""
            raise InsufficientCapacity(f"InsufficientCapacity: {where} has no capacity (limit {row[0]}{every})")
    if not zone:
        return
    row = conn.execute("SELECT max_live FROM capacity WHERE flavor = ? AND zone = ?", (flavor, zone)).fetchone()
    if row is not None:
        live_row = conn.execute("SELECT live FROM zone_live WHERE flavor = ? AND zone = ?", (flavor, zone)).fetchone()
        if (0 if live_row is None else int(live_row[0])) >= int(row[0]):
            raise InsufficientCapacity(f"InsufficientCapacity: {where} has no capacity (limit {row[0]})")


def read_faults(db: Database) -> FaultSettings:
    """The fault controls currently in force."""
    with db.read() as conn:
        meta = dict(
            conn.execute(
                "SELECT key, value FROM meta WHERE key IN "
                "('error_rate', 'seed', 'slow_launch', 'lost_response', 'quota')"
            ).fetchall()
        )
        limits = {(str(f), str(z)): int(n) for f, z, n in conn.execute("SELECT flavor, zone, max_live FROM capacity")}
    seed = meta.get("seed")
    quota = meta.get("quota")
    return FaultSettings(
        error_rate=float(meta.get("error_rate", 0.0)),
        seed=None if seed is None else int(seed),
        slow_launch=float(meta.get("slow_launch", 0.0)),
        lost_response=float(meta.get("lost_response", 0.0)),
        capacity={f: n for (f, z), n in limits.items() if not z},
        zone_capacity={key: n for key, n in limits.items() if key[1]},
        quota=None if quota is None else int(quota),
    )


def set_error_rate(db: Database, rate: float, seed: int | None = None) -> None:
    """Make each create/read/delete fail with a retryable API error with probability ``rate``.

    With a ``seed`` the sequence of outcomes is deterministic (the draw counter restarts).
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"error rate must be between 0 and 1, not {rate}")
    with db.write() as conn:
        set_meta(conn, "error_rate", repr(float(rate)))
        set_meta(conn, "seed", None if seed is None else str(int(seed)))
        set_meta(conn, "draws", "0")


def set_capacity(db: Database, flavor: str, limit: int | None, zone: str = "") -> None:
    """Allow at most ``limit`` live instances of ``flavor`` (in ``zone``; "" every zone together);
    ``None`` removes that limit."""
    if limit is not None and limit < 0:
        raise ValueError(f"capacity must be 0 or more, not {limit}")
    with db.write() as conn:
        if limit is None:
            conn.execute("DELETE FROM capacity WHERE flavor = ? AND zone = ?", (flavor, zone))
        else:
            conn.execute(
                "INSERT OR REPLACE INTO capacity(flavor, zone, max_live) VALUES (?, ?, ?)", (flavor, zone, int(limit))
            )


def set_quota(db: Database, limit: int | None) -> None:
    """Allow the account at most ``limit`` live instances (every flavor); ``None`` removes the quota."""
    if limit is not None and limit < 0:
        raise ValueError(f"quota must be 0 or more, not {limit}")
    with db.write() as conn:
        set_meta(conn, "quota", None if limit is None else str(int(limit)))


def set_lost_response(db: Database, rate: float) -> None:
    """Make each API create, with probability ``rate``, succeed but raise a retryable error.

    This is the crash between the cloud call and Terraform's state write: the instance
    exists, Terraform does not know it, and only the client token prevents a twin on retry.
    Uses the error rate's seed, if any.
    """
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"lost response rate must be between 0 and 1, not {rate}")
    with db.write() as conn:
        set_meta(conn, "lost_response", repr(float(rate)))


def set_slow_launch(db: Database, seconds: float) -> None:
    """Add ``seconds`` to every create made through the API (0 turns it off)."""
    if seconds < 0:
        raise ValueError(f"slow launch must be 0 seconds or more, not {seconds}")
    with db.write() as conn:
        set_meta(conn, "slow_launch", repr(float(seconds)))


def clear_faults(db: Database) -> None:
    """Remove every fault control (error rate, seed, slow launches, capacity limits, quota)."""
    with db.write() as conn:
        for key in ("error_rate", "seed", "slow_launch", "lost_response", "quota"):
            set_meta(conn, key, None)
        set_meta(conn, "draws", "0")
        conn.execute("DELETE FROM capacity")
