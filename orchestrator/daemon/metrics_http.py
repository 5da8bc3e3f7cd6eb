"""The metrics endpoint's HTTP server: a fixed number of threads, a cap on connections, a read deadline.

prometheus-client's own server (``start_http_server``) starts a thread for every connection and
waits for its request without a deadline: 300 connections that sent nothing kept 300 threads
of the daemon, for ever. Here one thread accepts connections and reads their requests with
non-blocking sockets, so a connection that has not sent its whole request costs a socket and
the bytes it sent (at most ``max_request_bytes``), never a thread, and is closed when
``read_timeout`` passes first. A complete request goes to one of ``workers`` threads, which
answer it with prometheus-client's WSGI application (the exposition itself: content
negotiation, compression, ``name[]`` filters) and write the answer within ``write_timeout``. At
most ``max_connections`` are open: one more closes the oldest whose request is not complete
(idle or slow), so idle connections cannot keep a scrape out; when every open connection is
being answered, the new one is closed (the scraper tries again at its next interval).
One request per connection (``Connection: close``), as prometheus-client's server does.

With an ``ssl.SSLContext`` the same holds over TLS: the handshake is driven by the reading thread
on the non-blocking socket within the same ``read_timeout`` (a peer that stalls it costs no
thread either), and a handshake that fails (no client certificate when the context asks for
one, not TLS at all) closes the connection unanswered.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import logging
import queue
import selectors
import socket
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

log = logging.getLogger(__name__)

# A WSGI application (prometheus-client's ``make_wsgi_app``): environ, start_response -> body.
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class ServerLimits:
    """What one endpoint may hold (docs/daemon.md, "Metrics")."""

    max_connections: int = 64
    workers: int = 2
    read_timeout: float = 10.0  # from accept to the end of the request's headers
    write_timeout: float = 10.0  # for the whole answer
    max_request_bytes: int = 16 * 1024  # request line and headers; a scrape sends a few hundred


DEFAULT_LIMITS = ServerLimits()


@dataclass
class _Pending:
    """A connection whose request is not complete yet."""

    deadline: float
    peer: str
    data: bytearray
    handshaken: bool = True  # False while a TLS handshake is under way


class BoundedServer:
    """Serves ``app`` on ``host:port`` within ``limits``; :meth:`start`, then :meth:`stop`."""

    def __init__(
        self,
        host: str,
        port: int,
        app: WsgiApp,
        limits: ServerLimits = DEFAULT_LIMITS,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.app = app
        self.limits = limits
        self.tls = tls
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        self.socket = socket.socket(family, kind, proto)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(128)
            self.socket.setblocking(False)
        except OSError:
            self.socket.close()
            raise
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._pending: OrderedDict[socket.socket, _Pending] = OrderedDict()
        self._answering = 0  # connections handed to a worker and not closed yet
        self._lock = threading.Lock()
        self._requests: queue.Queue[tuple[socket.socket, bytes, str] | None] = queue.Queue()
        self._stopping = threading.Event()
        self._threads = [threading.Thread(target=self._accept_and_read, name="metrics-http", daemon=True)]
        self._threads += [
            threading.Thread(target=self._answer_requests, name=f"metrics-http-{i}", daemon=True)
            for i in range(limits.workers)
        ]

    def start(self) -> None:
        """Start the threads: one reading, ``limits.workers`` answering."""
        self._selector.register(self.socket, selectors.EVENT_READ)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop serving, close the listening socket and every connection."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_write.send(b"x")
        for _ in range(self.limits.workers):
            self._requests.put(None)
        for thread in self._threads:
            if thread.ident is not None:
                thread.join(timeout=self.limits.write_timeout + 1)
        for conn in list(self._pending):
            self._drop(conn)
        self._selector.close()
        for sock in (self.socket, self._wake_read, self._wake_write):
            sock.close()

    # -- the reading thread --------------------------------------------------------------------

    def _accept_and_read(self) -> None:
        while not self._stopping.is_set():
            timeout = None
            if self._pending:
                timeout = max(0.0, next(iter(self._pending.values())).deadline - time.monotonic())
            for key, _ in self._selector.select(timeout):
                conn = key.fileobj
                if conn is self.socket:
                    self._accept()
                elif conn is self._wake_read:
                    with contextlib.suppress(OSError):
                        self._wake_read.recv(64)
                else:
                    assert isinstance(conn, socket.socket)
                    self._read(conn)
            self._expire()

    def _accept(self) -> None:
        for _ in range(self.limits.max_connections):  # then the others get their turn
            try:
                conn, peer = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # out of descriptors, say: the next round tries again
                log.warning("metrics endpoint: cannot accept a connection: %s", exc)
                return
            with self._lock:
                full = len(self._pending) + self._answering >= self.limits.max_connections
            if full and self._pending:
                oldest = next(iter(self._pending))
                log.debug(
                    "metrics endpoint: %s closed, %d connections open", self._pending[oldest].peer, len(self._pending)
                )
                self._drop(oldest)
            elif full:
                conn.close()
                continue
            conn.setblocking(False)
            if self.tls is not None:
                try:
                    conn = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
                except OSError:
                    conn.close()
                    continue
            deadline = time.monotonic() + self.limits.read_timeout
            self._pending[conn] = _Pending(deadline, str(peer[0]), bytearray(), handshaken=self.tls is None)
            self._selector.register(conn, selectors.EVENT_READ)

    def _handshake(self, conn: ssl.SSLSocket) -> bool:
        """One step of the TLS handshake; True once it is done (the connection is dropped when it fails)."""
        try:
            conn.do_handshake()
        except ssl.SSLWantReadError:
            self._selector.modify(conn, selectors.EVENT_READ)
            return False
        except ssl.SSLWantWriteError:
            self._selector.modify(conn, selectors.EVENT_WRITE)
            return False
        except OSError as exc:  # no or a wrong client certificate, not TLS, reset
            log.debug("metrics endpoint: TLS handshake with %s failed: %s", self._pending[conn].peer, exc)
            self._drop(conn)
            return False
        self._selector.modify(conn, selectors.EVENT_READ)
        self._pending[conn].handshaken = True
        return True

    def _read(self, conn: socket.socket) -> None:
        pending = self._pending[conn]
        if not pending.handshaken and not (isinstance(conn, ssl.SSLSocket) and self._handshake(conn)):
            return
        # Over TLS, bytes already decrypted wait in the socket where select cannot see them.
        while self._read_chunk(conn, pending) and isinstance(conn, ssl.SSLSocket) and conn.pending():
            pass

    def _read_chunk(self, conn: socket.socket, pending: _Pending) -> bool:
        """One ``recv``; True while the request is incomplete and the connection open."""
        try:
            chunk = conn.recv(4096)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(conn)
            return False
        pending.data += chunk
        if b"\r\n\r\n" in pending.data:
            self._selector.unregister(conn)
            del self._pending[conn]
            with self._lock:
                self._answering += 1
            self._requests.put((conn, bytes(pending.data), pending.peer))
            return False
        if len(pending.data) > self.limits.max_request_bytes:
            self._drop(conn)
            return False
        return True

    def _expire(self) -> None:
        now = time.monotonic()
        while self._pending:
            conn, pending = next(iter(self._pending.items()))
            if pending.deadline > now:
                return
            self._drop(conn)

    def _drop(self, conn: socket.socket) -> None:
        self._pending.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn)
        conn.close()

    # -- the answering threads -----------------------------------------------------------------

    def _answer_requests(self) -> None:
        while (item := self._requests.get()) is not None:
            conn, head, peer = item
            try:
                conn.setblocking(True)
                conn.settimeout(self.limits.write_timeout)
                conn.sendall(self._answer(head, peer))
            except Exception as exc:  # one bad or vanished client must not end the worker
                log.debug("metrics endpoint: request from %s not answered: %s", peer, exc)
            finally:
                conn.close()
                with self._lock:
                    self._answering -= 1

    def _answer(self, head: bytes, peer: str) -> bytes:
        """The whole HTTP response to the request ``head`` (request line and headers)."""
        line, _, rest = head.partition(b"\r\n")
        parts = line.decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return _response("400 Bad Request", [("Content-Type", "text/plain")], b"bad request\n")
        method, target, version = parts
        path, _, query = target.partition("?")
        headers = http.client.parse_headers(io.BytesIO(rest))
        host, port = self.server_address[:2]
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "PATH_INFO": unquote(path),
            "QUERY_STRING": query,
            "SERVER_PROTOCOL": version,
            "SERVER_NAME": str(host),
            "SERVER_PORT": str(port),
            "REMOTE_ADDR": peer,
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "https" if self.tls is not None else "http",
            "wsgi.input": io.BytesIO(),
            "wsgi.errors": io.StringIO(),
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for name, value in headers.items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        started: list[Any] = []

        def start_response(status: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> None:
            started[:] = [status, response_headers]

        body = b"".join(self.app(environ, start_response))
        status, response_headers = started
        return _response(status, response_headers, b"" if method == "HEAD" else body)


def _response(status: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    lines = [f"HTTP/1.0 {status}", *(f"{k}: {v}" for k, v in headers)]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body
