"""A client-side bound on one call: a server that stops answering cannot hold a caller forever.

The session's ``statement_timeout`` is the server's own bound; it does nothing when the server
itself hangs (stopped, swapped out, a Unix socket whose peer froze) or the network drops every
packet. :func:`bounded` starts a timer for the call; if the call outlasts it, the timer shuts
the connection's socket down, psycopg's blocked read returns with an error at once, and the
caller's error says the server gave no answer. A call that finishes first cancels the timer;
the two never both act (one small lock decides), so a healthy next call is never cut.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import psycopg


class Watchdog:
    """The timer of one call; ``fired`` tells the caller its error was the bound's doing."""

    def __init__(self, conn: psycopg.Connection[Any], seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._conn = conn
        self._lock = threading.Lock()
        self._finished = False
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        with self._lock:
            if self._finished:
                return
            self.fired = True
            with contextlib.suppress(OSError, psycopg.Error):  # closed meanwhile: nothing left to cut
                fd = os.dup(self._conn.pgconn.socket)
                with socket.socket(fileno=fd) as sock:
                    sock.shutdown(socket.SHUT_RDWR)

    def start(self) -> None:
        self._timer.start()

    def finish(self) -> None:
        with self._lock:
            self._finished = True
            self._timer.cancel()


@contextlib.contextmanager
def bounded(conn: psycopg.Connection[Any], seconds: float) -> Iterator[Watchdog]:
    """Run the block with ``conn``'s socket shut down if it lasts longer than ``seconds``."""
    watchdog = Watchdog(conn, seconds)
    watchdog.start()
    try:
        yield watchdog
    finally:
        watchdog.finish()
