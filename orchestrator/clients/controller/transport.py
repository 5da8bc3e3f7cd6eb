"""The transport: one TLS connection to the controller and the I/O thread that owns it.

The socket is non-blocking and only its I/O thread (``ctl-io-<address>``) calls into OpenSSL,
so reads and writes never interleave inside one ``SSL`` object. The thread reads frames (the
length prefix is checked before the body is buffered), hands each whole body to ``on_frame``
and writes what other threads queued with :meth:`Connection.send`. Any error of the stream (a
protocol violation included) ends the connection, never the process: ``on_closed`` is called
once with the reason, and the session reconnects.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import ssl
import threading
from collections.abc import Callable

from orchestrator.errors import ControllerError
from orchestrator.model.config import ControllerSettings
from orchestrator.protocol import framing, tls

log = logging.getLogger(__name__)

IO_CHUNK = 64 * 1024
# Chunks read per turn of the I/O loop: a peer that sends without pause must not keep the
# thread from writing what is queued (lease renewals among it).
READS_PER_TURN = 16


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) as ``(host, port)``; ``ControllerError`` when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ControllerError(f"controller address {address!r} is not host:port", delay=60.0)
    return host.strip("[]"), int(port)


def dial(address: str, settings: ControllerSettings, context: Callable[[], ssl.SSLContext]) -> ssl.SSLSocket:
    """TCP connect and TLS handshake with ``address``; ``ControllerError`` saying what failed."""
    host, port = split_address(address)
    try:
        raw = socket.create_connection((host, port), timeout=settings.connect_timeout)
    except OSError as exc:
        raise ControllerError(f"cannot connect: {exc.strerror or exc}") from None
    # After connecting, so that "unreachable" is reported before a CA that is not there yet
    # (the simulated controller makes its CA when it first starts).
    try:
        ctx = context()  # a CA file that cannot be read is a ConfigError
    except BaseException:
        raw.close()
        raise
    try:
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return ctx.wrap_socket(raw, server_hostname=settings.server_name or host)
    except ssl.SSLError as exc:
        raw.close()
        raise ControllerError(f"TLS: {tls.describe_tls_error(exc)}") from None
    except OSError as exc:
        raw.close()
        raise ControllerError(f"TLS handshake failed: {exc.strerror or exc}") from None


class Connection:
    """One TLS connection and its I/O thread."""

    def __init__(
        self,
        sock: ssl.SSLSocket,
        address: str,
        max_frame: int,
        on_frame: Callable[[Connection, bytes], None],
        on_closed: Callable[[Connection, str], None],
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

    def _closing_requested(self) -> bool:
        # Once closing (a frame handler may close us, e.g. on a push-queue overflow) nothing more
        # is read or handled.
        with self._lock:
            return self._closing is not None

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
        for _ in range(READS_PER_TURN):
            if self._closing_requested():
                return
            try:
                data = self.sock.recv(IO_CHUNK)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except ssl.SSLZeroReturnError:
                data = b""
            if not data:
                raise framing.ConnectionClosed("connection closed by the controller")
            self._in += data
            while len(self._in) >= framing.HEADER.size and not self._closing_requested():
                (length,) = framing.HEADER.unpack_from(self._in)
                framing.check_frame_length(length, self._max)
                end = framing.HEADER.size + length
                if len(self._in) < end:
                    break
                body = bytes(self._in[framing.HEADER.size : end])
                del self._in[:end]
                self._on_frame(self, body)
