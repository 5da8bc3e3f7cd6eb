"""The session: connect, join as a provisioner, follow ``notPrimary`` redirects, keep it up.

``connect`` tries the configured addresses in turn (the last primary first), following up to
``MAX_REDIRECTS`` redirects, and joins. ``keep_up`` (the ``ctl-connect`` thread) connects,
runs the link's ``on_joined`` (resync: demand, facts, hosts, lease re-acquire), waits for the
connection to drop and starts over with exponential backoff and jitter, until ``close``.
"""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from orchestrator.clients.controller.pending import NotPrimary, PendingRequests
from orchestrator.clients.controller.transport import Connection, dial
from orchestrator.clients.controller.types import LinkState
from orchestrator.errors import ControllerError, FinalError, LeaseLost, XceprovError
from orchestrator.model.backoff import Backoff
from orchestrator.model.config import ControllerSettings
from orchestrator.protocol import tls

log = logging.getLogger(__name__)

MAX_REDIRECTS = 3
FrameHandler = Callable[[Connection, bytes], None]


class Session:
    """The current connection and what the join told us (see the module docstring)."""

    def __init__(
        self,
        settings: ControllerSettings,
        join: dict[str, Any],
        pending: PendingRequests,
        on_frame: FrameHandler,
        backoff: Backoff,
    ) -> None:
        self.settings = settings
        self._join = join
        self._pending = pending
        self._on_frame = on_frame
        self._backoff = backoff
        self._ctx: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self._conn: Connection | None = None
        self._state = LinkState(connected=False)
        self._preferred: str | None = None
        self.closed = threading.Event()
        self._connected = threading.Event()

    def state(self) -> LinkState:
        """Where the link is connected, the primary and term it learned at join."""
        with self._lock:
            return self._state

    def current(self) -> tuple[Connection | None, LinkState]:
        """The joined connection (None when not connected) and the state."""
        with self._lock:
            return self._conn, self._state

    def wait_connected(self, timeout: float) -> bool:
        """Wait until joined; False on timeout."""
        return self._connected.wait(timeout)

    def redirect(self, conn: Connection, address: str) -> None:
        """``conn``'s controller is not the primary: reconnect, to ``address`` first when known."""
        with self._lock:
            self._preferred = address or None
        conn.close(f"not the primary; redirected to {address or 'the next address'}")

    def close(self) -> None:
        """Stop reconnecting and close the connection (waits for its I/O thread)."""
        self.closed.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            conn.close("link closed")
            conn.thread.join(timeout=10)

    def _context(self) -> ssl.SSLContext:
        if self._ctx is None:
            s = self.settings
            self._ctx = tls.client_context(s.ca, cert_file=s.client_cert, key_file=s.client_key)
        return self._ctx

    def _order(self) -> list[str]:
        addresses = list(self.settings.addresses)
        preferred = self._preferred
        if preferred in addresses:
            i = addresses.index(preferred)
            addresses = addresses[i:] + addresses[:i]
        elif preferred:
            addresses.insert(0, preferred)
        return addresses

    def connect(self) -> LinkState:
        """Try every address in turn (following redirects); join; raise naming what was tried."""
        tried: list[str] = []
        queue_ = self._order()
        redirects = 0
        while queue_ and not self.closed.is_set():
            address = queue_.pop(0)
            try:
                redirect = self._try(address)
            except ControllerError as exc:
                tried.append(f"{address} ({exc})")
                continue
            if redirect is None:
                return self.state()
            tried.append(f"{address} (not the primary; redirected to {redirect or 'nowhere'})")
            redirects += 1
            if redirect and redirects <= MAX_REDIRECTS:
                queue_.insert(0, redirect)
        message = "controller unreachable; tried " + "; ".join(tried) if tried else "link closed"
        with self._lock:
            self._state = replace(self._state, connected=False, last_error=message, tried=tuple(tried))
        raise ControllerError(message)

    def _try(self, address: str) -> str | None:
        """Connect and join at ``address``; the redirect target when it is not the primary."""
        s = self.settings
        sock = dial(address, s, self._context)
        conn = Connection(sock, address, s.max_frame_bytes, self._on_frame, self._closed)
        try:
            kind, body = self._pending.call(conn, "joinProvisioner", self._join, s.request_timeout)
        except NotPrimary as r:
            conn.close("redirected")
            return r.redirect
        except ControllerError:
            conn.close("join failed")
            raise
        if kind != "joined":
            conn.close("unexpected join reply")
            raise ControllerError(f"unexpected reply to join: {kind}")
        body = body or {}
        with self._lock:
            previous = self._state
            self._conn = conn
            self._preferred = address
            self._state = LinkState(
                connected=True,
                address=address,
                primary=str(body.get("primary", "")) or address,
                term=int(body.get("term", 0)),
                controller_id=str(body.get("controllerId", "")),
                lease_ttl=int(body.get("leaseTtlMs", 0)) / 1000.0,
                reconnects=previous.reconnects + (1 if previous.address else 0),
            )
            state = self._state
        self._connected.set()
        if conn.closed.is_set():  # dropped between join and now: let the loop notice
            self._closed(conn, conn.reason)
        log.info(
            "joined controller %s as provisioner %s (term %d)", address, self._join.get("instanceId", ""), state.term
        )
        return None

    def _closed(self, conn: Connection, reason: str) -> None:
        """On the I/O thread when ``conn`` ends: fail its requests, say disconnected."""
        self._pending.fail(conn, reason)
        with self._lock:
            if self._conn is conn:
                self._conn = None
                self._connected.clear()
                self._state = replace(self._state, connected=False, last_error=reason)

    def keep_up(self, on_joined: Callable[[], None]) -> None:
        """Connect, run ``on_joined``, wait for the drop, back off, again; until ``close``."""
        while not self.closed.is_set():
            try:
                self.connect()
            except XceprovError as exc:  # unreachable, TLS refused, or a CA file that cannot be read
                delay = self._backoff.next_delay()
                log.warning("%s; retrying in %.1fs", exc, delay)
                self.closed.wait(delay)
                continue
            conn, _ = self.current()
            if conn is None:
                continue
            try:
                on_joined()
            except (ControllerError, LeaseLost, FinalError) as exc:
                log.warning("resync after join failed: %s; reconnecting", exc)
                conn.close(f"resync failed: {exc}")
            else:
                self._backoff.reset()
            while not conn.closed.wait(0.5):
                if self.closed.is_set():
                    return
            if not self.closed.is_set():
                delay = self._backoff.next_delay()
                log.warning(
                    "connection to the controller at %s lost (%s); reconnecting in %.2fs",
                    conn.address,
                    conn.reason,
                    delay,
                )
                self.closed.wait(delay)
