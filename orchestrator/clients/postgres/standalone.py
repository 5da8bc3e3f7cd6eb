"""The standalone lease with the ``pg`` backend: a row per provider with an expiry, renewed.

Without a controller there is no lease epoch. Standalone commands on several machines are kept
off one provider by a row of ``xceprov.standalone_leases`` (``migrations.py``, version 2), the
controller's lease rule in a table (docs/scale-out.md, "Without a controller"):

- :meth:`StandaloneLeases.take` grants the row to a new holder only when it is free: released,
  or past ``expires_at + grace`` by the server's clock. Each grant to a new holder counts
  ``grant_no`` up (the epoch-like counter a renewal and a release must name);
- :meth:`StandaloneLeases.renew` moves ``expires_at`` to the server's now + TTL while the row
  still names this holder and grant; the holder stops mutating at ``renew_sent + TTL − margin``
  on its own monotonic clock (``orchestrator/ops/standalone.py``), before ``expires_at``;
- the row is a durable row, not a session's: a server restart or a lost connection frees
  nothing (unlike the advisory lock it replaces, which died with the server's session and let a
  second command in while the first one's apply still ran);
- :meth:`take` also refuses a provider a daemon of the cluster holds: a live member row
  (``members``, within the member's own live window plus the grace) that holds it, or a document
  fence (``fences``) carrying a controller epoch: the provider is the controller's, and a
  standalone command beside it would change it with no epoch.

Every call is one bounded transaction on a connection of its own (``session.py``): a long
statement of the documents never delays a renewal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

from orchestrator.clients.postgres.migrations import migrate
from orchestrator.clients.postgres.session import STATEMENT_TIMEOUT, Connection, Session
from orchestrator.errors import LeaseHeld

# A member row written before version 2 has no live window: the daemons' default (two thirds of
# the simulated controller's 15 s TTL, model.members.live_window).
DEFAULT_LIVE_FOR: Final = 10.0

T = TypeVar("T")


@dataclass(frozen=True)
class Holding:
    """Who keeps a provider from a standalone command, and for how long at least (seconds)."""

    holder: str
    why: str
    retry_after: float


def _daemon_holding(conn: Connection, cluster: str, provider: str, grace: float) -> Holding | None:
    """A daemon that holds ``provider`` by the members table or the documents' fence."""
    member = _live_member(conn, cluster, provider, grace)
    if member is not None:
        return member
    fence = _controller_epoch(conn, cluster, provider)
    if fence is not None:
        return Holding(
            "the controller's lease holder",
            f"wrote its shared state under the controller's epoch {fence}: the provider is managed by the "
            "controller (run the command without standalone, or let the daemon do it; if this cluster's "
            f"controller is gone for good: xceprov ops hand-over {provider})",
            0.0,
        )
    return None


def _live_member(conn: Connection, cluster: str, provider: str, grace: float) -> Holding | None:
    """A member row holding ``provider`` whose heartbeat is younger than its live window plus ``grace``."""
    row = conn.execute(
        "SELECT instance, label, held ->> %s, "
        "extract(epoch FROM heartbeat_at + make_interval(secs => coalesce(live_for, %s) + %s) - clock_timestamp()) "
        "FROM xceprov.members WHERE cluster = %s AND held ? %s "
        "AND heartbeat_at + make_interval(secs => coalesce(live_for, %s) + %s) > clock_timestamp() "
        "ORDER BY instance LIMIT 1",
        (provider, DEFAULT_LIVE_FOR, grace, cluster, provider, DEFAULT_LIVE_FOR, grace),
    ).fetchone()
    if row is not None:
        instance, label, epoch, left = row
        return Holding(
            f"daemon {label} ({instance})",
            f"holds it under the controller's lease (epoch {epoch}, by the shared store's members)",
            max(0.0, float(left)),
        )
    return None


def _controller_epoch(conn: Connection, cluster: str, provider: str) -> str | None:
    """The controller epoch on ``provider``'s document fence newer than any handed over (a tag)."""
    row = conn.execute(
        "SELECT f.term, f.seq FROM xceprov.fences f LEFT JOIN xceprov.standalone_leases s "
        "ON s.cluster = f.cluster AND s.provider = f.provider WHERE f.cluster = %s AND f.provider = %s "
        "AND (f.term, f.seq) > (coalesce(s.released_term, 0), coalesce(s.released_seq, 0))",
        (cluster, provider),
    ).fetchone()
    return None if row is None else f"{row[0]}.{row[1]}"


def _holding(
    conn: Connection, cluster: str, provider: str, grace: float, row: tuple[str, float], holder: str
) -> Holding | None:
    """Who keeps ``holder`` from ``provider``: the row's standalone holder (``row``: its holder and
    the seconds until its lease and grace end), else a daemon; None when nobody does."""
    current, left = row
    if current and current != holder and left > 0:
        return Holding(current, "is a standalone command whose lease has not run out", left)
    return _daemon_holding(conn, cluster, provider, grace)


def refusal(provider: str, holding: Holding) -> LeaseHeld:
    """The one-line refusal of a standalone command (exit 9), naming the holder."""
    retry = f"; retry in {holding.retry_after:.0f}s" if holding.retry_after > 0 else ""
    return LeaseHeld(
        f"provider {provider}: held by {holding.holder}, which {holding.why}; nothing was changed{retry}",
        holding.holder,
        holding.retry_after,
    )


class StandaloneLeases:
    """The standalone lease rows of one cluster, on a connection of their own (see the module)."""

    def __init__(
        self, conn_str: str, cluster: str, *, connect_timeout: float = 5.0, statement_timeout: float = STATEMENT_TIMEOUT
    ) -> None:
        self.cluster = cluster
        self._session = Session(conn_str, connect_timeout, statement_timeout)
        self._migrated = False

    def _run(self, what: str, work: Callable[[Connection], T]) -> T:
        if not self._migrated:
            self._session.run("migrating the schema", migrate)
            self._migrated = True
        return self._session.run(what, work)

    def take(self, provider: str, holder: str, ttl: float, grace: float) -> int:
        """Grant ``provider`` to ``holder`` for ``ttl`` seconds (server clock) when it is free;
        the grant's number. ``LeaseHeld`` (nothing changed) while another holder's lease and its
        ``grace`` last, or a daemon holds the provider (module docstring)."""

        def work(conn: Connection) -> int:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO xceprov.standalone_leases (cluster, provider, holder, grant_no, expires_at, grace_s) "
                    "VALUES (%s, %s, '', 0, 'epoch', 0) ON CONFLICT DO NOTHING",
                    (self.cluster, provider),
                )
                row = conn.execute(
                    "SELECT holder, grant_no, "
                    "extract(epoch FROM expires_at + make_interval(secs => grace_s) - clock_timestamp()) "
                    "FROM xceprov.standalone_leases WHERE cluster = %s AND provider = %s FOR UPDATE",
                    (self.cluster, provider),
                ).fetchone()
                assert row is not None  # inserted above when missing
                current, grant_no, left = str(row[0]), int(row[1]), float(row[2])
                holding = _holding(conn, self.cluster, provider, grace, (current, left), holder)
                if holding is not None:
                    raise refusal(provider, holding)
                conn.execute(
                    "UPDATE xceprov.standalone_leases SET holder = %s, grant_no = %s, "
                    "expires_at = clock_timestamp() + make_interval(secs => %s), grace_s = %s, "
                    "granted_at = clock_timestamp() WHERE cluster = %s AND provider = %s",
                    (holder, grant_no + 1, float(ttl), float(grace), self.cluster, provider),
                )
                return grant_no + 1

        return self._run(f"taking the standalone lease of provider {provider!r}", work)

    def check(self, provider: str, grace: float) -> None:
        """``LeaseHeld`` when :meth:`take` would be refused now (a look: nothing is taken)."""

        def work(conn: Connection) -> Holding | None:
            row = conn.execute(
                "SELECT holder, extract(epoch FROM expires_at + make_interval(secs => grace_s) - clock_timestamp()) "
                "FROM xceprov.standalone_leases WHERE cluster = %s AND provider = %s",
                (self.cluster, provider),
            ).fetchone()
            held = ("", 0.0) if row is None else (str(row[0]), float(row[1]))
            return _holding(conn, self.cluster, provider, grace, held, "")

        holding = self._run(f"reading the standalone lease of provider {provider!r}", work)
        if holding is not None:
            raise refusal(provider, holding)

    def renew(self, provider: str, holder: str, grant_no: int, ttl: float) -> bool:
        """Extend the grant to the server's now + ``ttl``; False when the row no longer names this
        holder and grant (another command was admitted after the grace: the lease is lost for good)."""

        def work(conn: Connection) -> bool:
            row = conn.execute(
                "UPDATE xceprov.standalone_leases SET expires_at = clock_timestamp() + make_interval(secs => %s) "
                "WHERE cluster = %s AND provider = %s AND holder = %s AND grant_no = %s RETURNING grant_no",
                (float(ttl), self.cluster, provider, holder, grant_no),
            ).fetchone()
            return row is not None

        return self._run(f"renewing the standalone lease of provider {provider!r}", work)

    def hand_over(self, provider: str, grace: float) -> str | None:
        """Hand ``provider`` from the controller to standalone commands: the controller epoch on
        its document fence (returned as a tag; None when there was none) no longer refuses them.
        ``LeaseHeld`` while a daemon's member row holds it (nothing changed). A newer controller
        epoch written later refuses them again."""

        def work(conn: Connection) -> str | None:
            with conn.transaction():
                conn.execute(
                    "INSERT INTO xceprov.standalone_leases (cluster, provider, holder, grant_no, expires_at, grace_s) "
                    "VALUES (%s, %s, '', 0, 'epoch', 0) ON CONFLICT DO NOTHING",
                    (self.cluster, provider),
                )
                conn.execute(
                    "SELECT 1 FROM xceprov.standalone_leases WHERE cluster = %s AND provider = %s FOR UPDATE",
                    (self.cluster, provider),
                )
                daemon = _live_member(conn, self.cluster, provider, grace)
                if daemon is not None:
                    raise refusal(provider, daemon)
                epoch = _controller_epoch(conn, self.cluster, provider)
                if epoch is not None:
                    term, _, seq = epoch.partition(".")
                    conn.execute(
                        "UPDATE xceprov.standalone_leases SET released_term = %s, released_seq = %s "
                        "WHERE cluster = %s AND provider = %s",
                        (int(term), int(seq), self.cluster, provider),
                    )
                return epoch

        return self._run(f"handing provider {provider!r} over to standalone commands", work)

    def release(self, provider: str, holder: str, grant_no: int) -> None:
        """Free the row at once (only this holder's grant: a successor's is left alone)."""
        self._run(
            f"releasing the standalone lease of provider {provider!r}",
            lambda conn: conn.execute(
                "UPDATE xceprov.standalone_leases SET holder = '', expires_at = 'epoch' "
                "WHERE cluster = %s AND provider = %s AND holder = %s AND grant_no = %s",
                (self.cluster, provider, holder, grant_no),
            ),
        )

    def close(self) -> None:
        """Close the connection."""
        self._session.close()


def standalone_holding(conn: Connection, cluster: str, provider: str) -> str | None:
    """The standalone command holding ``provider`` now (its lease or its grace not over), else
    None: a controller epoch's write is refused meanwhile (``store._fence``)."""
    row = conn.execute(
        "SELECT holder FROM xceprov.standalone_leases WHERE cluster = %s AND provider = %s AND holder <> '' "
        "AND expires_at + make_interval(secs => grace_s) > clock_timestamp()",
        (cluster, provider),
    ).fetchone()
    return None if row is None else str(row[0])
