"""The simulated controller's network side: TLS listeners, the admin Unix socket, a ticker.

Every connection has its own thread that both reads and writes (one thread per TLS socket:
OpenSSL objects are not meant for concurrent read and write from two threads). Frames for a
connection are queued (bounded) and a per-connection wake-up pipe gets the thread out of its
``poll`` at once. Anything wrong on one connection (oversize, truncated, garbage, wrong type,
traversal bomb, a stuck or slow peer) ends that connection only, with a logged reason.

A hostile client's cost is bounded (docs/protocol.md, "Authentication and roles" and §9):
sockets are non-blocking and every deadline covers a whole step, not one ``recv``: the TLS
handshake, the join, and each frame from its first byte to its last. Frames are assembled as
bytes arrive (:class:`FrameReader`), so a length prefix alone allocates nothing. Connections
are capped in total, per peer address and while not joined. Memory is therefore bounded by
``max_connections`` × (the bytes of one frame actually received + ``QUEUE_FRAMES`` queued
outgoing frames).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import queue
import select
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from orchestrator.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    ConnectionClosed,
    FrameError,
    FrameTruncated,
    open_envelope,
    send_frame,
)
from orchestrator.protocol.tls import describe_tls_error, peer_identity
from orchestrator.sim.controller import dispatch
from orchestrator.sim.controller.admin import unix_path
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.reader import FrameReader
from orchestrator.sim.controller.state import Session

log = logging.getLogger(__name__)

QUEUE_FRAMES: Final = 1024
SEND_TIMEOUT: Final = 30.0
RECV_CHUNK: Final = 64 * 1024  # the most read per step: memory follows what arrives


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client may cost: whole-step deadlines (seconds) and connection caps."""

    handshake_timeout: float = 10.0  # the whole TLS handshake
    join_timeout: float = 10.0  # from accept to a successful join
    frame_timeout: float = 30.0  # from a frame's first byte to its last
    max_per_peer: int = 64  # TLS connections from one peer address
    max_unjoined: int = 128  # TLS connections not joined yet (handshaking included)


class Deadline(TimeoutError):
    """A whole-step deadline passed; the reason names the step."""


_CLOSE: Final = b""  # queue sentinel: close after what is queued


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) → ``(host, port)``."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{text!r}: expected HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


class Connection:
    """One accepted connection (TLS or the admin Unix socket) and its thread."""

    def __init__(
        self,
        server: ControllerServer,
        sock: socket.socket,
        peer: str,
        sid: int,
        *,
        tls: ssl.SSLContext | None,
        admin: bool,
    ) -> None:
        self.server = server
        self.raw = sock
        self.sock: socket.socket = sock
        self.peer = peer
        self.tls = tls
        self.out: queue.Queue[bytes] = queue.Queue(maxsize=QUEUE_FRAMES)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self.close_reason = ""
        self.peer_host = ""  # the peer's address, for the per-peer cap ("" on the admin socket)
        self.session = Session(sid=sid, peer=peer, send=self._send, close=self._close, role="admin" if admin else "")
        self.thread = threading.Thread(target=self._run, name=f"conn-{sid}-{peer}", daemon=True)

    # Called from any thread (under the core lock): never block.
    def _send(self, frame: bytes) -> None:
        if self.close_reason:
            return
        try:
            self.out.put_nowait(frame)
        except queue.Full:
            self._close("slow consumer: outgoing queue full")
            return
        self._wake()

    def _close(self, reason: str) -> None:
        if self.close_reason:
            return
        self.close_reason = reason
        try:
            self.out.put_nowait(_CLOSE)
        except queue.Full:
            # A slow consumer: do not wait for the queue to drain; the thread may be stuck in a
            # send. Shutting the socket down fails that send and ends the thread.
            with contextlib.suppress(OSError):
                self.raw.shutdown(socket.SHUT_RDWR)
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")

    def _flush(self) -> bool:
        """Send queued frames; False once the close sentinel is reached."""
        while True:
            try:
                frame = self.out.get_nowait()
            except queue.Empty:
                return not self.close_reason
            if frame == _CLOSE:
                return False
            self.sock.settimeout(SEND_TIMEOUT)
            try:
                send_frame(self.sock, frame)
            finally:
                self.sock.setblocking(False)

    def _run(self) -> None:
        core = self.server.core
        registered = False
        try:
            started = time.monotonic()
            if self.tls is not None:
                self.raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    self.sock = self._handshake(self.tls, started + self.server.limits.handshake_timeout)
                except (ssl.SSLError, OSError) as exc:
                    log.info("connection from %s: TLS handshake failed: %s", self.peer, describe_tls_error(exc))
                    return
                self._authenticate()
            self.sock.setblocking(False)
            core.add_session(self.session)
            registered = True
            self._loop(started)
        except ConnectionClosed:
            log.debug("connection from %s closed by peer", self.peer)
        except FrameError as exc:
            log.warning("connection from %s dropped: %s", self.peer, exc)
        except Deadline as exc:
            log.warning("connection from %s dropped: %s", self.peer, exc)
        except TimeoutError:
            log.warning("connection from %s dropped: timed out", self.peer)
        except (OSError, ssl.SSLError) as exc:
            if not self.close_reason:
                log.info("connection from %s dropped: %s", self.peer, exc)
        except Exception:  # a bug must not take the server down: drop this connection only
            log.exception("connection from %s dropped: internal error", self.peer)
        finally:
            if self.close_reason:
                log.info("connection from %s closed: %s", self.peer, self.close_reason)
            self.close_reason = self.close_reason or "closed"
            if registered:
                core.remove_session(self.session)
            with contextlib.suppress(OSError):
                self.sock.close()
            with contextlib.suppress(OSError):
                self.raw.close()
            os.close(self._wake_r)
            os.close(self._wake_w)
            self.server._forget(self)

    def _handshake(self, ctx: ssl.SSLContext, deadline: float) -> ssl.SSLSocket:
        """The TLS handshake, non-blocking, held to one deadline (not one per ``recv``)."""
        self.raw.setblocking(False)
        sock = ctx.wrap_socket(self.raw, server_side=True, do_handshake_on_connect=False)
        try:
            while True:
                try:
                    sock.do_handshake()
                    return sock
                except ssl.SSLWantReadError:
                    events = select.POLLIN
                except ssl.SSLWantWriteError:
                    events = select.POLLOUT
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"not complete within {self.server.limits.handshake_timeout:g}s")
                poller = select.poll()
                poller.register(sock.fileno(), events)
                poller.poll(max(1, int(left * 1000)))
        except BaseException:
            sock.close()
            raise

    def _authenticate(self) -> None:
        """Record the role and identity the verified client certificate names, if any."""
        assert isinstance(self.sock, ssl.SSLSocket)
        ident = peer_identity(self.sock)
        if ident is None:
            return
        self.session.cert_role, self.session.cert_identity = ident.role, ident.identity
        if ident.role == "admin":
            self.session.role = "admin"  # an admin certificate needs no join, like the admin socket
        log.info("connection from %s authenticated as %s", self.peer, ident)

    def _recv(self) -> bytes | None:
        """What the socket has now (``None``: nothing yet); ``b""`` at end of stream."""
        try:
            return self.sock.recv(RECV_CHUNK)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return None  # e.g. a TLS record without application data (a session ticket)
        except ssl.SSLZeroReturnError:
            return b""

    def _check_deadlines(self, started: float, reader: FrameReader, now: float) -> float:
        """Raise :class:`Deadline` for a late join or frame; else seconds until the next one."""
        limits = self.server.limits
        left = 1.0
        if not self.session.role:
            join_left = started + limits.join_timeout - now
            if join_left <= 0:
                raise Deadline(f"no join within {limits.join_timeout:g}s")
            left = min(left, join_left)
        if reader.in_frame and reader.started is not None:
            frame_left = reader.started + limits.frame_timeout - now
            if frame_left <= 0:
                raise Deadline(
                    f"frame not complete within {limits.frame_timeout:g}s ({reader.buffered} bytes of it received)"
                )
            left = min(left, frame_left)
        return left

    def _loop(self, started: float) -> None:
        reader = FrameReader(self.server.max_frame_bytes)
        # poll, not select: descriptors above FD_SETSIZE (1024) are normal with many connections.
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            if not self._flush():
                return
            left = self._check_deadlines(started, reader, time.monotonic())
            pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0
            if not pending:
                ready = {fd for fd, _ in poller.poll(max(1, int(left * 1000)))}
                if self._wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                if self.sock.fileno() not in ready:
                    continue
            data = self._recv()
            if data is None:
                continue
            if not data:
                if reader.in_frame:
                    raise FrameTruncated(f"connection closed inside a frame ({reader.buffered} bytes of it received)")
                raise ConnectionClosed("connection closed by peer")
            for frame in reader.feed(data, time.monotonic()):
                with open_envelope(frame) as env:
                    dispatch.handle(self.server.core, self.session, env, on_shutdown=self.server.request_stop)


class ControllerServer:
    """Listeners, connections and the ticker around one :class:`ControllerCore`."""

    def __init__(
        self,
        core: ControllerCore,
        tls: ssl.SSLContext,
        listen: list[tuple[str, int]],
        *,
        admin_path: Path | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_connections: int = 512,
        tick_interval: float | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        self.core = core
        self.limits = limits or ConnectionLimits()
        self.tls = tls
        self.listen = listen
        self.admin_path = admin_path
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.tick_interval = tick_interval if tick_interval is not None else core.check_interval
        self.addresses: list[tuple[str, int]] = []
        self._listeners: list[socket.socket] = []
        self._admin_sock: socket.socket | None = None
        self._conns: set[Connection] = set()
        self._per_peer: dict[str, int] = {}  # open TLS connections per peer address
        self._conns_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.on_stop: Callable[[], None] | None = None

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Bind every listener (port 0 picks a free port; see ``addresses``) and start threads."""
        for host, port in self.listen:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            s = socket.socket(family, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
            s.listen(128)
            self._listeners.append(s)
            self.addresses.append((host, s.getsockname()[1]))
        if self.admin_path is not None:
            with contextlib.suppress(FileNotFoundError):
                self.admin_path.unlink()
            a = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old = os.umask(0o177)  # the socket file is created 0600: its permissions are the auth
            try:
                with unix_path(self.admin_path) as name:
                    a.bind(name)
            finally:
                os.umask(old)
            a.listen(16)
            self._admin_sock = a
        primary = self.core.primary or f"{self.addresses[0][0]}:{self.addresses[0][1]}"
        self.core.primary = primary
        for target, name in ((self._accept_loop, "accept"), (self._tick_loop, "tick")):
            t = threading.Thread(target=target, name=f"controller-{name}", daemon=True)
            t.start()
            self._threads.append(t)
        log.info("simulated controller term %d listening on %s", self.core.term, self.addresses)

    def request_stop(self) -> None:
        """Ask the server to stop (from any thread, e.g. the admin shutdown request)."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until stop is requested; True if it was."""
        return self._stop.wait(timeout)

    def stop(self) -> None:
        """Stop accepting, drop every connection, join the threads."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        for s in self._listeners:
            s.close()
        if self._admin_sock is not None:
            self._admin_sock.close()
            with contextlib.suppress(FileNotFoundError):
                if self.admin_path is not None:
                    self.admin_path.unlink()
        with self._conns_lock:
            conns = list(self._conns)
        for c in conns:
            c.session.close("controller shutting down")
        for c in conns:
            c.thread.join(timeout=5)

    def __enter__(self) -> ControllerServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- threads ---------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        sel = selectors.DefaultSelector()
        for s in self._listeners:
            sel.register(s, selectors.EVENT_READ, False)
        if self._admin_sock is not None:
            sel.register(self._admin_sock, selectors.EVENT_READ, True)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(timeout=0.2):
                    lsock = key.fileobj
                    assert isinstance(lsock, socket.socket)
                    try:
                        conn, addr = lsock.accept()
                    except OSError:
                        continue
                    self._start_connection(conn, addr, admin=bool(key.data))
        finally:
            sel.close()

    def _start_connection(self, sock: socket.socket, addr: object, *, admin: bool) -> None:
        peer = "admin" if admin else (f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr))
        host = "" if admin or not isinstance(addr, tuple) else str(addr[0])
        with self._conns_lock:
            refused = self._refusal(host, admin)
            if refused:
                log.warning("connection from %s refused: %s", peer, refused)
                sock.close()
                return
            c = Connection(self, sock, peer, next(self._ids), tls=None if admin else self.tls, admin=admin)
            c.peer_host = host
            self._conns.add(c)
            if host:
                self._per_peer[host] = self._per_peer.get(host, 0) + 1
        c.thread.start()

    def _refusal(self, host: str, admin: bool) -> str:
        """Why a new connection is refused ("" when it is not); call with ``_conns_lock`` held."""
        if len(self._conns) >= self.max_connections:
            return f"{len(self._conns)} connections open (max_connections {self.max_connections})"
        if admin:
            return ""
        if self._per_peer.get(host, 0) >= self.limits.max_per_peer:
            return f"{self._per_peer[host]} connections from {host} open (max_per_peer {self.limits.max_per_peer})"
        unjoined = sum(1 for c in self._conns if not c.session.role)
        if unjoined >= self.limits.max_unjoined:
            return f"{unjoined} connections not joined yet (max_unjoined {self.limits.max_unjoined})"
        return ""

    def _forget(self, c: Connection) -> None:
        with self._conns_lock:
            if c in self._conns and c.peer_host:
                left = self._per_peer.get(c.peer_host, 1) - 1
                if left > 0:
                    self._per_peer[c.peer_host] = left
                else:
                    self._per_peer.pop(c.peer_host, None)
            self._conns.discard(c)

    def connection_count(self) -> int:
        """Open connections (TLS and admin)."""
        with self._conns_lock:
            return len(self._conns)

    def _tick_loop(self) -> None:
        while not self._stop.wait(self.tick_interval):
            try:
                self.core.tick()
            except Exception:  # keep ticking: one bad tick must not stop leases from expiring
                log.exception("controller tick failed")
