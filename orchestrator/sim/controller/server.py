"""The simulated controller's network side: TLS listeners, the admin Unix socket, a ticker.

Every connection has its own thread that both reads and writes (one thread per TLS socket:
OpenSSL objects are not meant for concurrent read and write from two threads). Frames for a
connection are queued (bounded) and a per-connection wake-up pipe gets the thread out of its
``poll`` at once. Anything wrong on one connection (oversize, truncated, garbage, wrong type,
traversal bomb, a stuck or slow peer) ends that connection only, with a logged reason.

Memory is bounded by: ``max_connections`` × (``max_frame_bytes`` being read +
``QUEUE_FRAMES`` queued outgoing frames).
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
from pathlib import Path
from typing import Final

from orchestrator.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    ConnectionClosed,
    FrameError,
    open_envelope,
    recv_frame,
    send_frame,
)
from orchestrator.protocol.tls import describe_tls_error
from orchestrator.sim.controller import dispatch
from orchestrator.sim.controller.admin import unix_path
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.state import Session

log = logging.getLogger(__name__)

QUEUE_FRAMES: Final = 1024
HANDSHAKE_TIMEOUT: Final = 10.0
JOIN_TIMEOUT: Final = 10.0  # a connection that has not joined by then is dropped
FRAME_TIMEOUT: Final = 30.0  # a frame once started must arrive completely within this
SEND_TIMEOUT: Final = 30.0

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
            send_frame(self.sock, frame)

    def _run(self) -> None:
        core = self.server.core
        registered = False
        try:
            if self.tls is not None:
                self.raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                self.raw.settimeout(HANDSHAKE_TIMEOUT)
                try:
                    self.sock = self.tls.wrap_socket(self.raw, server_side=True)
                except (ssl.SSLError, OSError) as exc:
                    log.info("connection from %s: TLS handshake failed: %s", self.peer, describe_tls_error(exc))
                    return
            core.add_session(self.session)
            registered = True
            started = time.monotonic()
            self._loop(started)
        except ConnectionClosed:
            log.debug("connection from %s closed by peer", self.peer)
        except FrameError as exc:
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

    def _loop(self, started: float) -> None:
        max_bytes = self.server.max_frame_bytes
        # poll, not select: descriptors above FD_SETSIZE (1024) are normal with many connections.
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while True:
            if not self._flush():
                return
            if not self.session.role and time.monotonic() - started > JOIN_TIMEOUT:
                raise TimeoutError("no join")
            pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending() > 0
            if not pending:
                ready = {fd for fd, _ in poller.poll(1000)}
                if self._wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                if self.sock.fileno() not in ready:
                    continue
            self.sock.settimeout(FRAME_TIMEOUT)
            try:
                frame = recv_frame(self.sock, max_bytes)
            except ssl.SSLWantReadError:
                continue  # TLS record without application data (e.g. a session ticket)
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
    ) -> None:
        self.core = core
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
        with self._conns_lock:
            if len(self._conns) >= self.max_connections:
                log.warning("connection from %s refused: %d connections open", peer, len(self._conns))
                sock.close()
                return
            c = Connection(self, sock, peer, next(self._ids), tls=None if admin else self.tls, admin=admin)
            self._conns.add(c)
        c.thread.start()

    def _forget(self, c: Connection) -> None:
        with self._conns_lock:
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
