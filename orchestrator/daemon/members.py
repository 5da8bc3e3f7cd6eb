"""The daemon's membership in a shared database: its heartbeat, the live members, its share.

With ``terraform.backend: pg`` several daemons share one database and split the providers
(docs/daemon.md, "Several daemons: providers split by lease"). :class:`Membership` is one
daemon's side of that, on a thread of its own so that a long pass never delays it:

- every ``min(TTL/3, daemon.reconcile_interval)`` it writes its member row (instance, label,
  configured providers, held providers with their epochs; the database stamps it with its own
  clock), then reads the live members (a heartbeat younger than two thirds of the lease TTL,
  ``share.live_window``) and computes the
  providers dealt to it (``share.py``); the daemon's loop applies that set between two passes;
- when a heartbeat or the read fails (the database is down or unreachable), :meth:`closed_reason`
  says since when (or that no heartbeat succeeded within the live window), and the daemon's
  fence (``fence.StoreFence``) refuses every mutation until a
  heartbeat succeeds again: a daemon that cannot heartbeat looks dead to the others, who deal its
  providers among themselves, so it must not act on them, whatever its leases say. The leases are
  kept (renewing them is the controller's business): when the store answers again, work resumes
  with no new acquire;
- at a clean stop, :meth:`stop` removes the member row at once (``leave``), so the others deal its
  providers without waiting for its row to age out.

The store is anything with ``heartbeat``, ``members``, ``leave`` and ``close``
(``orchestrator.model.members.MemberStore``: ``orchestrator.clients.postgres.SharedStore``);
tests use a fake.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.daemon.share import dealt, live_window
from orchestrator.model.members import MemberRow, MemberStore

if TYPE_CHECKING:
    from orchestrator.clients.postgres import SharedStore
    from orchestrator.workspace.pgsite import PgSite

log = logging.getLogger(__name__)


class DedicatedStore:
    """The shared store on a connection of the heartbeat's own (never the one the loop's documents
    use: a long statement of theirs must not delay a heartbeat), opened at its first use and again
    after a failed open, so a daemon started while the database is down runs with its fence
    closed and joins when the database answers."""

    def __init__(self, site: PgSite, connect_timeout: float = 5.0) -> None:
        self._site = site
        self._timeout = connect_timeout
        self._store: SharedStore | None = None

    def _opened(self) -> SharedStore:
        if self._store is None:
            self._store = self._site.open_store(connect_timeout=self._timeout)
        return self._store

    def heartbeat(
        self,
        instance: str,
        label: str,
        configured: Sequence[str],
        held: Mapping[str, str],
        live_for: float | None = None,
    ) -> None:
        """This member's row (``SharedStore.heartbeat``)."""
        self._opened().heartbeat(instance, label, configured, held, live_for)

    def members(self, live_within: float) -> Sequence[MemberRow]:
        """The live members (``SharedStore.members``)."""
        return self._opened().members(live_within)

    def leave(self, instance: str) -> None:
        """Remove this member's row (``SharedStore.leave``)."""
        self._opened().leave(instance)

    def close(self) -> None:
        """Close the connection, when one was opened."""
        if self._store is not None:
            self._store.close()
            self._store = None


def utc(seconds: float) -> str:
    """Unix seconds as an ISO UTC time (the form of every time in status)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


class Membership:
    """One daemon's heartbeat and share (see the module docstring)."""

    def __init__(
        self,
        store: MemberStore,
        *,
        instance: str,
        label: str,
        configured: Sequence[str],
        held: Callable[[], Mapping[str, str]],
        ttl: Callable[[], float],
        interval: Callable[[], float],
        on_change: Callable[[], None] = lambda: None,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.instance = instance
        self.label = label
        self.configured = sorted(configured)
        self._held = held
        self._ttl = ttl
        self._interval = interval
        self._on_change = on_change
        self._wall = wall
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._members: list[MemberRow] = []
        self._dealt: set[str] | None = None  # None until the first members read
        self._last_ok: float | None = None  # monotonic time of the last heartbeat and read
        self._down_since: float | None = None  # wall time of the first failure since the last success
        self._error = ""
        self._version = 0  # counts changes of the share, of what the members hold, of reachability
        self._reads = 0  # successful heartbeats with their members read
        self._held_view: dict[str, dict[str, str]] = {}

    # -- one heartbeat --------------------------------------------------------------------------

    def beat(self) -> bool:
        """One heartbeat and members read (tried twice: the store reconnects after a failure);
        whether they succeeded."""
        ttl = self._ttl()
        try:
            members = self._heartbeat(ttl)
        except Exception:  # once more at once: a restarted server ended the old connection
            try:
                members = self._heartbeat(ttl)
            except Exception as exc:  # any failure to heartbeat closes the fence; the reason is kept
                self._failed(exc)
                return False
        by_member: dict[str, Sequence[str]] = {m.instance: list(m.configured) for m in members}
        by_member[self.instance] = self.configured  # alive by definition: it just wrote its row
        share = dealt(by_member, self.instance)
        held_view = {m.instance: dict(m.held) for m in members}
        with self._lock:
            recovered = self._down_since is not None
            changed = share != self._dealt or recovered or held_view != self._held_view
            if changed:
                self._version += 1
            self._held_view = held_view
            self._reads += 1
            self._members = members
            self._dealt = share
            self._last_ok = self._monotonic()
            self._down_since = None
            self._error = ""
        if recovered:
            log.warning("shared store answers again: mutations resume")
        if changed:
            self._on_change()
        return True

    def _heartbeat(self, ttl: float) -> list[MemberRow]:
        # The row carries its live window: a standalone command judges it as the daemons do, and
        # the store removes it once it is long past it (a member killed with kill -9).
        self.store.heartbeat(self.instance, self.label, self.configured, dict(self._held()), live_window(ttl))
        return list(self.store.members(live_window(ttl)))

    def _failed(self, exc: BaseException) -> None:
        error = (str(exc).splitlines() or [type(exc).__name__])[0]
        with self._lock:
            first = self._down_since is None
            if first:
                self._down_since = self._wall()
            self._error = error
            if first:
                self._version += 1
        if first:
            log.error("shared store unreachable: every provider's fence is closed until it answers: %s", error)
            self._on_change()

    # -- what the daemon reads -------------------------------------------------------------------

    def dealt(self) -> set[str] | None:
        """The providers dealt to this daemon by the last members read (None before the first)."""
        with self._lock:
            return None if self._dealt is None else set(self._dealt)

    def reads(self) -> int:
        """How many heartbeats with their members read have succeeded."""
        with self._lock:
            return self._reads

    def version(self) -> int:
        """A number that changes whenever the share, what the members hold or the store's
        reachability changes (the daemon hands the keeper its share again then)."""
        with self._lock:
            return self._version

    def closed_reason(self) -> str | None:
        """Why no mutation may run now (None while the store answers): the store has been
        unreachable since a time, or no heartbeat succeeded within the live window (two thirds
        of the TTL: the others see this daemon as gone)."""
        with self._lock:
            down, error, last_ok = self._down_since, self._error, self._last_ok
        if down is not None:
            return f"shared store unreachable since {utc(down)}: {error}"
        if last_ok is None:
            return "no heartbeat in the shared store yet"
        silent = self._monotonic() - last_ok
        if silent >= live_window(self._ttl()):
            return f"no heartbeat in the shared store for {silent:.0f}s (the other daemons count this one as gone)"
        return None

    def to_json(self) -> dict[str, Any]:
        """The membership for the status file: reachable or since when not, the live members
        with what each holds, and this daemon's share."""
        reason = self.closed_reason()
        with self._lock:
            down, error, members, share = self._down_since, self._error, list(self._members), self._dealt
        return {
            "backend": "pg",
            "reachable": down is None,
            "unreachable_since": down,
            "error": error,
            "closed": reason or "",
            "instance": self.instance,
            "label": self.label,
            "dealt": sorted(share) if share is not None else None,
            "members": [
                {
                    "instance": m.instance,
                    "label": m.label,
                    "configured": sorted(m.configured),
                    "held": dict(sorted(m.held.items())),
                    "age": round(m.age_s, 3),
                }
                for m in sorted(members, key=lambda m: m.instance)
            ],
        }

    # -- the thread ------------------------------------------------------------------------------

    def start(self) -> None:
        """Heartbeat on a thread of its own until :meth:`stop`."""
        self._thread = threading.Thread(target=self._run, name="store-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except Exception:  # a bug must not end the heartbeats silently (the fence would close after a TTL)
                log.exception("shared store heartbeat failed unexpectedly")
            self._stop.wait(max(0.1, self._interval()))

    def stop(self, leave: bool = True) -> None:
        """Stop heartbeating; with ``leave`` (a clean stop, leases released) remove the member row
        so the others take its providers at once; close the store."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if leave:
            try:
                self.store.leave(self.instance)
            except Exception as exc:  # the row then ages out after the live window (2 TTL/3)
                log.warning("could not leave the shared store (the row ages out): %s", exc)
        try:
            self.store.close()
        except Exception as exc:  # closing a broken connection is no error of the stop
            log.debug("shared store close: %s", exc)
