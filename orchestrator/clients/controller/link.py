"""The controller link: one TLS connection to the XCE controller, joined as a provisioner.

Threads (none of them ever runs Terraform or Ansible work, so such work cannot delay them):

- ``ctl-io``: the dedicated I/O thread of the current connection. It owns the socket: it reads
  frames, completes the future of every reply, and writes what requesters queued (the socket is
  non-blocking and only this thread calls into OpenSSL, so reads and writes never interleave
  inside one ``SSL`` object). A ``leaseRevoked`` push is applied right here, at once.
- ``ctl-connect``: connects (the configured addresses in turn, following ``notPrimary``
  redirects to the primary), joins, resyncs (fresh demand snapshot, facts of its providers,
  hosts, lease re-acquire), then waits for the connection to drop and starts over with
  exponential backoff and jitter.
- ``ctl-push``: calls the demand and host-event callbacks, so a slow callback never stops the
  I/O thread.

Requests carry an id and get exactly one reply: ``request`` waits on a future with the request
timeout. A timeout, a connection that drops mid-request, or no connection at all raise
``ControllerError`` (retryable) at once or at the timeout, never a hang; a timed-out request
also drops the connection, since its stream can no longer be trusted to be in step.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import queue
import random
import select
import socket
import ssl
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Any

from orchestrator.clients.controller import messages as m
from orchestrator.clients.controller.backoff import Backoff
from orchestrator.clients.controller.lease import LeaseManager
from orchestrator.clients.controller.types import (
    ControllerStatus,
    DemandSnapshot,
    Epoch,
    Fact,
    HostEvent,
    HostInfo,
    LeaseDenied,
    LeaseGrant,
    LeaseRevoked,
    LinkState,
)
from orchestrator.errors import ControllerError, FinalError, LeaseLost, XceprovError
from orchestrator.model.config import ControllerSettings
from orchestrator.protocol import framing, tls
from orchestrator.protocol.schema import Envelope

log = logging.getLogger(__name__)

Reply = tuple[str, Any]
DemandCallback = Callable[[DemandSnapshot], None]
HostEventCallback = Callable[[HostEvent], None]
RevokeCallback = Callable[[LeaseRevoked], None]
ResyncCallback = Callable[[dict[str, list[Fact]]], None]
ReconnectCallback = Callable[[LinkState], None]

MAX_REDIRECTS = 3
IO_CHUNK = 64 * 1024


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) as ``(host, port)``; ``ControllerError`` when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ControllerError(f"controller address {address!r} is not host:port", delay=60.0)
    return host.strip("[]"), int(port)


class _Connection:
    """One TLS connection and its I/O thread."""

    def __init__(
        self,
        sock: ssl.SSLSocket,
        address: str,
        max_frame: int,
        on_frame: Callable[[_Connection, bytes], None],
        on_closed: Callable[[_Connection, str], None],
    ) -> None:
        self.sock = sock
        self.address = address
        self._max = max_frame
        self._on_frame = on_frame
        self._on_closed = on_closed
        self._lock = threading.Lock()
        self._out = bytearray()
        self._chunk: bytes | None = None
        self._in = bytearray()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._closing: str | None = None
        self.closed = threading.Event()
        self.reason = ""
        sock.setblocking(False)
        self.thread = threading.Thread(target=self._run, name=f"ctl-io-{address}", daemon=True)
        self.thread.start()

    def send(self, body: bytes) -> None:
        """Queue one frame for the I/O thread."""
        if len(body) > self._max:
            raise ControllerError(f"request of {len(body)} bytes exceeds the maximum frame size {self._max}")
        with self._lock:
            if self._closing is not None or self.closed.is_set():
                raise ControllerError(f"connection to the controller at {self.address} is closed")
            self._out += framing.HEADER.pack(len(body))
            self._out += body
        self._wake()

    def close(self, reason: str) -> None:
        """Ask the I/O thread to close the connection (idempotent, returns at once)."""
        with self._lock:
            if self._closing is None:
                self._closing = reason
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _run(self) -> None:
        reason = "connection closed"
        try:
            while True:
                with self._lock:
                    if self._closing is not None:
                        reason = self._closing
                        break
                    if self._chunk is None and self._out:
                        self._chunk = bytes(self._out[:IO_CHUNK])
                        del self._out[:IO_CHUNK]
                if not self.sock.pending():
                    wants = [self.sock] if self._chunk is not None else []
                    readable, _, _ = select.select([self.sock, self._wake_r], wants, [], 5.0)
                    if self._wake_r in readable:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                if self._chunk is not None:
                    try:
                        sent = self.sock.send(self._chunk)
                        # The same bytes are offered again after a want-read/write (OpenSSL rule).
                        self._chunk = self._chunk[sent:] or None
                    except (ssl.SSLWantWriteError, ssl.SSLWantReadError):
                        pass
                self._read()
        except (framing.ConnectionClosed, framing.FrameTruncated) as exc:
            reason = str(exc)
        except framing.FrameError as exc:
            reason = f"protocol error from the controller: {exc}"
            log.warning("controller %s: %s; dropping the connection", self.address, reason)
        except (OSError, ssl.SSLError) as exc:
            reason = f"connection lost: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
        except Exception as exc:  # a message we could not convert: drop the connection, not the thread
            reason = f"protocol error from the controller: {type(exc).__name__}: {exc}"
            log.warning("controller %s: %s; dropping the connection", self.address, reason)
        finally:
            with contextlib.suppress(OSError):
                self.sock.close()
            self._wake_r.close()
            self._wake_w.close()
            self.reason = reason
            self.closed.set()
            self._on_closed(self, reason)

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(IO_CHUNK)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except ssl.SSLZeroReturnError:
                data = b""
            if not data:
                raise framing.ConnectionClosed("connection closed by the controller")
            self._in += data
            while len(self._in) >= framing.HEADER.size:
                (length,) = framing.HEADER.unpack_from(self._in)
                framing.check_frame_length(length, self._max)
                end = framing.HEADER.size + length
                if len(self._in) < end:
                    break
                body = bytes(self._in[framing.HEADER.size : end])
                del self._in[:end]
                self._on_frame(self, body)


class ControllerLink:
    """The orchestrator's link to the controller (see the module docstring)."""

    def __init__(
        self,
        settings: ControllerSettings,
        *,
        instance_id: str,
        providers: Sequence[str] = (),
        cluster: str = "",
        version: str = "",
        rng: random.Random | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        if not settings.addresses:
            raise ControllerError("no controller addresses are configured (controller.addresses)", delay=60.0)
        self.settings = settings
        self.instance_id = instance_id
        self.providers = tuple(providers)
        self.cluster = cluster
        self.version = version or _version()
        self._rng = rng or random.Random()
        self._backoff = backoff or Backoff(initial=0.1, maximum=5.0, rng=self._rng)
        self._ctx: ssl.SSLContext | None = None
        self._lock = threading.Lock()
        self._conn: _Connection | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[Future[Reply], _Connection]] = {}
        self._state = LinkState(connected=False)
        self._preferred: str | None = None
        self._closed = threading.Event()
        self._connected = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pushes: queue.Queue[DemandSnapshot | HostEvent | None] = queue.Queue()
        self._on_demand: list[DemandCallback] = []
        self._on_host_event: list[HostEventCallback] = []
        self._on_revoked: list[RevokeCallback] = []
        self._on_resync: list[ResyncCallback] = []
        self._on_reconnect: list[ReconnectCallback] = []
        self._demand: DemandSnapshot | None = None
        self._facts: dict[str, list[Fact]] = {p: [] for p in self.providers}
        self._hosts: tuple[HostInfo, ...] = ()

    # -- callbacks -----------------------------------------------------------------------------

    def on_demand(self, callback: DemandCallback) -> None:
        """Call ``callback`` with every demand snapshot newer than the last one (push thread)."""
        self._on_demand.append(callback)

    def on_host_event(self, callback: HostEventCallback) -> None:
        """Call ``callback`` with every host event (push thread)."""
        self._on_host_event.append(callback)

    def on_lease_revoked(self, callback: RevokeCallback) -> None:
        """Call ``callback`` on the I/O thread the moment a revocation arrives (must be quick)."""
        self._on_revoked.append(callback)

    def on_resync(self, callback: ResyncCallback) -> None:
        """Call ``callback`` with all facts of the providers after every (re)join (connect thread)."""
        self._on_resync.append(callback)

    def on_reconnect(self, callback: ReconnectCallback) -> None:
        """Call ``callback`` after every successful (re)join and resync (connect thread)."""
        self._on_reconnect.append(callback)

    # -- state ---------------------------------------------------------------------------------

    def state(self) -> LinkState:
        """Where the link is connected, the primary and term it learned at join."""
        with self._lock:
            return self._state

    def demand(self) -> DemandSnapshot | None:
        """The newest demand snapshot seen (by ``(term, seq)``)."""
        with self._lock:
            return self._demand

    def facts(self, provider: str) -> list[Fact]:
        """The provider's facts as of the last resync plus the commits made since."""
        with self._lock:
            return list(self._facts.get(provider, []))

    def hosts(self) -> tuple[HostInfo, ...]:
        """Hosts as of the last resync."""
        with self._lock:
            return self._hosts

    def wait_connected(self, timeout: float) -> bool:
        """Wait until joined; False on timeout."""
        return self._connected.wait(timeout)

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self, resync: bool = False) -> LinkState:
        """Connect and join once, on this thread (no background reconnects): for one-shot use
        such as ``xceprov status``. Raises ``ControllerError`` naming every address tried."""
        self._start_push_thread()
        self._connect()
        if resync:
            self._resync()
        return self.state()

    def start(self) -> None:
        """Connect in the background and keep the link up (reconnect, rejoin, resync) until ``close``."""
        self._start_push_thread()
        thread = threading.Thread(target=self._connect_loop, name="ctl-connect", daemon=True)
        thread.start()
        self._threads.append(thread)

    def close(self) -> None:
        """Close the connection and stop every thread of the link."""
        self._closed.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            conn.close("link closed")
            conn.thread.join(timeout=10)
        self._pushes.put(None)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=10)
        self._threads.clear()

    def __enter__(self) -> ControllerLink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_push_thread(self) -> None:
        if any(t.name == "ctl-push" for t in self._threads):
            return
        thread = threading.Thread(target=self._push_loop, name="ctl-push", daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- connecting ----------------------------------------------------------------------------

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

    def _connect(self) -> LinkState:
        """Try every address in turn (following redirects); join; raise naming what was tried."""
        tried: list[str] = []
        queue_ = self._order()
        redirects = 0
        while queue_ and not self._closed.is_set():
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
        host, port = split_address(address)
        s = self.settings
        try:
            raw = socket.create_connection((host, port), timeout=s.connect_timeout)
        except OSError as exc:
            raise ControllerError(f"cannot connect: {exc.strerror or exc}") from None
        # After connecting, so that "unreachable" is reported before a CA that is not there yet
        # (the simulated controller makes its CA when it first starts).
        try:
            ctx = self._context()  # a CA file that cannot be read is a ConfigError
        except BaseException:
            raw.close()
            raise
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock = ctx.wrap_socket(raw, server_hostname=s.server_name or host)
        except ssl.SSLError as exc:
            raw.close()
            raise ControllerError(f"TLS: {tls.describe_tls_error(exc)}") from None
        except OSError as exc:
            raw.close()
            raise ControllerError(f"TLS handshake failed: {exc.strerror or exc}") from None
        conn = _Connection(sock, address, s.max_frame_bytes, self._frame, self._conn_closed)
        try:
            kind, body = self._request_on(
                conn,
                "joinProvisioner",
                {
                    "instanceId": self.instance_id,
                    "version": self.version,
                    "providers": list(self.providers),
                    "cluster": self.cluster,
                },
                s.request_timeout,
            )
        except _Redirect as r:
            conn.close("redirected")
            return r.address
        except ControllerError:
            conn.close("join failed")
            raise
        if kind != "joined":
            conn.close("unexpected join reply")
            raise ControllerError(f"unexpected reply to join: {kind}")
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
            self._conn_closed(conn, conn.reason)
        log.info("joined controller %s as provisioner %s (term %d)", address, self.instance_id, state.term)
        return None

    def _connect_loop(self) -> None:
        while not self._closed.is_set():
            try:
                self._connect()
            except XceprovError as exc:  # unreachable, TLS refused, or a CA file that cannot be read
                delay = self._backoff.next_delay()
                log.warning("%s; retrying in %.1fs", exc, delay)
                self._closed.wait(delay)
                continue
            with self._lock:
                conn = self._conn
            if conn is None:
                continue
            try:
                self._resync()
            except (ControllerError, LeaseLost, FinalError) as exc:
                log.warning("resync after join failed: %s; reconnecting", exc)
                conn.close(f"resync failed: {exc}")
            else:
                self._backoff.reset()
                state = self.state()
                for cb in self._on_reconnect:
                    _safe(cb, state)
            while not conn.closed.wait(0.5):
                if self._closed.is_set():
                    return
            if not self._closed.is_set():
                delay = self._backoff.next_delay()
                log.warning("connection to the controller at %s lost (%s); reconnecting in %.2fs",
                            conn.address, conn.reason, delay)
                self._closed.wait(delay)

    def _resync(self) -> None:
        """After a join: fresh demand snapshot, the providers' facts, hosts."""
        snapshot = self.request_demand()
        self._deliver_demand(snapshot)
        facts: dict[str, list[Fact]] = {}
        for provider in self.providers:
            facts[provider] = self.query_facts(provider)
        hosts = self.host_status() if self.providers else ()
        with self._lock:
            self._facts.update(facts)
            self._hosts = tuple(hosts)
        for cb in self._on_resync:
            _safe(cb, {p: list(f) for p, f in facts.items()})

    # -- frames --------------------------------------------------------------------------------

    def _frame(self, conn: _Connection, body: bytes) -> None:
        """On the I/O thread: decode, complete a reply's future, or handle a push."""
        with framing.open_envelope(body) as env:
            kind = framing.which(env)
            data = env.to_dict()
        request_id = int(data.get("requestId", 0))
        payload = data.get(kind)
        if request_id:
            with self._lock:
                entry = self._pending.pop(request_id, None)
            if entry is None:
                log.debug("late reply %d (%s) ignored", request_id, kind)
                return
            entry[0].set_result((kind, payload))
            return
        if kind == "leaseRevoked":
            revoked = m.lease_revoked(payload or {})
            log.warning("controller revoked the lease of provider %s (%s)", revoked.provider, revoked.reason)
            for cb in self._on_revoked:
                _safe(cb, revoked)
        elif kind == "demand":
            self._pushes.put(m.demand(payload or {}))
        elif kind == "hostEvent":
            self._pushes.put(m.host_event(payload or {}))
        else:
            raise framing.WrongMessageType(kind, "a reply or a provisioner push")

    def _conn_closed(self, conn: _Connection, reason: str) -> None:
        with self._lock:
            failed = [f for rid, (f, c) in list(self._pending.items()) if c is conn]
            for rid in [rid for rid, (_, c) in self._pending.items() if c is conn]:
                del self._pending[rid]
            if self._conn is conn:
                self._conn = None
                self._connected.clear()
                self._state = replace(self._state, connected=False, last_error=reason)
        for fut in failed:
            if not fut.done():
                fut.set_exception(
                    ControllerError(f"connection to the controller at {conn.address} lost mid-request: "
                                    f"{reason}")
                )

    def _push_loop(self) -> None:
        while True:
            item = self._pushes.get()
            if item is None:
                return
            if isinstance(item, DemandSnapshot):
                self._deliver_demand(item)
            else:
                for cb in self._on_host_event:
                    _safe(cb, item)

    def _deliver_demand(self, snapshot: DemandSnapshot) -> None:
        with self._lock:
            if self._demand is not None and snapshot.order() <= self._demand.order():
                return  # level-triggered: only a newer picture replaces the one we have
            self._demand = snapshot
        for cb in self._on_demand:
            _safe(cb, snapshot)

    # -- requests ------------------------------------------------------------------------------

    def request(self, kind: str, body: Any = None, timeout: float | None = None) -> Reply:
        """Send one request and wait for its one reply: ``(reply member, payload dict)``.

        ``ControllerError`` when not connected, on timeout, or when the connection drops
        mid-request; a ``notPrimary`` answer also reconnects to the primary it names."""
        with self._lock:
            conn = self._conn
            state = self._state
        if conn is None:
            why = f": {state.last_error}" if state.last_error else ""
            raise ControllerError(f"not connected to the controller{why}")
        return self._request_on(conn, kind, body, timeout)

    def _request_on(self, conn: _Connection, kind: str, body: Any, timeout: float | None) -> Reply:
        request_id = next(self._ids)
        fut: Future[Reply] = Future()
        with self._lock:
            self._pending[request_id] = (fut, conn)
        try:
            env = Envelope.new_message(requestId=request_id, **{kind: body})
            conn.send(framing.encode(env))
        except ControllerError:
            with self._lock:
                self._pending.pop(request_id, None)
            raise
        wait = self.settings.request_timeout if timeout is None else timeout
        try:
            reply_kind, payload = fut.result(wait)
        except FutureTimeout:
            with self._lock:
                self._pending.pop(request_id, None)
            conn.close(f"no reply to {kind} within {wait:.1f}s")
            conn.closed.wait(1.0)  # so that state() already says disconnected when we raise
            raise ControllerError(
                f"no reply from the controller at {conn.address} within {wait:.1f}s to {kind}"
            ) from None
        if reply_kind == "error":
            payload = payload or {}
            code = str(payload.get("code", ""))
            message = str(payload.get("message", ""))
            if code == "notPrimary":
                redirect = str(payload.get("redirect", ""))
                if kind in ("joinProvisioner",):
                    raise _Redirect(redirect)
                self._redirect(conn, redirect)
                raise ControllerError(f"controller {conn.address} is not the primary "
                                      f"({redirect or 'unknown'})")
            if code in ("internal", "notJoined"):
                raise ControllerError(f"controller error on {kind}: {code}: {message}")
            raise FinalError(f"controller refused {kind}: {code}: {message}")
        return reply_kind, payload

    def _redirect(self, conn: _Connection, address: str) -> None:
        with self._lock:
            self._preferred = address or None
        conn.close(f"not the primary; redirected to {address or 'the next address'}")

    # -- typed requests ------------------------------------------------------------------------

    def _lease_answer(self, kind: str, payload: Any) -> LeaseGrant | LeaseDenied:
        if kind == "leaseGrant":
            return m.lease_grant(payload or {})
        if kind == "leaseDeny":
            return m.lease_deny(payload or {})
        raise ControllerError(f"unexpected reply to a lease request: {kind}")

    def acquire(self, provider: str, previous: Epoch | None = None) -> LeaseGrant | LeaseDenied:
        """``leaseAcquire`` (``previous`` is informational: the controller knows the previous holder)."""
        kind, payload = self.request("leaseAcquire", {"provider": provider, "epoch": m.epoch_dict(None)})
        return self._lease_answer(kind, payload)

    def renew(self, provider: str, epoch: Epoch) -> LeaseGrant | LeaseDenied:
        """``leaseRenew`` of the lease held under ``epoch``."""
        kind, payload = self.request("leaseRenew", {"provider": provider, "epoch": m.epoch_dict(epoch)})
        return self._lease_answer(kind, payload)

    def release(self, provider: str, epoch: Epoch) -> None:
        """``leaseRelease``: the provider is free at once."""
        kind, payload = self.request("leaseRelease", {"provider": provider, "epoch": m.epoch_dict(epoch)})
        if kind == "leaseDeny":
            log.info("release of provider %s: %s", provider, m.lease_deny(payload or {}).reason)

    def commit_fact(self, fact: Fact) -> int:
        """Commit a fact (idempotent); its ``factId``. ``LeaseLost`` on a stale epoch."""
        kind, payload = self.request("commitFact", m.fact_dict(fact))
        payload = payload or {}
        if kind == "ack":
            fact_id = int(payload.get("factId", 0))
            committed = replace(fact, fact_id=fact_id, holder=self.instance_id,
                                committed=int(payload.get("committedUnixMs", 0)) / 1000.0)
            with self._lock:
                known = self._facts.setdefault(fact.provider, [])
                if all(f.fact_id != fact_id for f in known):
                    known.append(committed)
            return fact_id
        if kind == "reject":
            reason = str(payload.get("reason", ""))
            message = str(payload.get("message", ""))
            if reason == "staleEpoch":
                current = m.epoch_of(payload.get("currentEpoch"))
                raise LeaseLost(
                    f"controller rejected the {fact.kind} fact of provider {fact.provider}: stale epoch "
                    f"{fact.epoch} (current {current})"
                )
            if reason == "notPrimary":
                with self._lock:
                    conn = self._conn
                if conn is not None:
                    self._redirect(conn, str(payload.get("redirect", "")))
                raise ControllerError(f"controller is not the primary: {message}")
            raise FinalError(f"controller rejected the {fact.kind} fact: {reason}: {message}")
        raise ControllerError(f"unexpected reply to commitFact: {kind}")

    def query_facts(self, provider: str, after: int = 0) -> list[Fact]:
        """Every fact of ``provider`` with ``factId > after`` (all pages)."""
        out: list[Fact] = []
        while True:
            query = {"provider": provider, "afterFactId": after, "limit": 0}
            kind, payload = self.request("queryFacts", query)
            if kind != "factList":
                raise ControllerError(f"unexpected reply to queryFacts: {kind}")
            payload = payload or {}
            page = [m.fact(f) for f in payload.get("facts", [])]
            out.extend(page)
            if not payload.get("more") or not page:
                return out
            after = page[-1].fact_id

    def request_demand(self) -> DemandSnapshot:
        """The controller's current demand snapshot."""
        kind, payload = self.request("requestDemand", None)
        if kind != "demand":
            raise ControllerError(f"unexpected reply to requestDemand: {kind}")
        return m.demand(payload or {})

    def host_status(self, provider: str = "", template: str = "") -> list[HostInfo]:
        """Hosts known to the controller (filtered by provider and template when given)."""
        kind, payload = self.request("hostStatus", {"provider": provider, "template": template})
        if kind != "hostList":
            raise ControllerError(f"unexpected reply to hostStatus: {kind}")
        return [m.host_info(h) for h in (payload or {}).get("hosts", [])]

    def query_status(self) -> ControllerStatus:
        """The controller's status view (leases by its clock, demand, hosts)."""
        kind, payload = self.request("queryStatus", None)
        if kind != "status":
            raise ControllerError(f"unexpected reply to queryStatus: {kind}")
        return m.controller_status(payload or {})

    def _host_ref(self, kind: str, provider: str, epoch: Epoch, instance_id: str, host_name: str,
                  reason: str) -> None:
        body = {"provider": provider, "epoch": m.epoch_dict(epoch), "instanceId": instance_id,
                "hostName": host_name, "reason": reason}
        reply, payload = self.request(kind, body)
        if reply == "ack":
            return
        if reply == "reject" and str((payload or {}).get("reason")) == "staleEpoch":
            raise LeaseLost(f"controller rejected {kind} for provider {provider}: stale epoch {epoch}")
        raise FinalError(f"controller refused {kind}: {reply}: {(payload or {}).get('message', '')}")

    def close_host(self, provider: str, epoch: Epoch, *, instance_id: str = "", host_name: str = "",
                   reason: str = "") -> None:
        """Drain a host (fenced by the provider's lease epoch)."""
        self._host_ref("hostClose", provider, epoch, instance_id, host_name, reason)

    def decommission_host(self, provider: str, epoch: Epoch, *, instance_id: str = "", host_name: str = "",
                          reason: str = "") -> None:
        """Decommission a host: its worker is stopped and a rejoin is refused."""
        self._host_ref("hostDecommission", provider, epoch, instance_id, host_name, reason)


class _Redirect(ControllerError):
    """A join answered with ``notPrimary``: connect to ``address`` instead."""

    def __init__(self, address: str) -> None:
        super().__init__(f"not the primary; redirect to {address or 'unknown'}")
        self.address = address


def _safe(callback: Callable[[Any], None], value: object) -> None:
    try:
        callback(value)
    except Exception:  # a callback's bug must not kill the link's threads
        log.exception("controller link callback %r failed", callback)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("xce-provisioner")
    except Exception:
        return "0"


def join_lease_manager(link: ControllerLink, manager: LeaseManager) -> None:
    """Wire an in-process ``LeaseManager`` to the link: revocations invalidate at once; every
    (re)join re-acquires (docs/protocol.md §8)."""
    link.on_lease_revoked(lambda r: manager.revoke(r.provider, r.epoch))
    link.on_reconnect(lambda _state: manager.kick(reacquire=True))
