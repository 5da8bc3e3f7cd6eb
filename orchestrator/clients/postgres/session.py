"""One guarded psycopg connection: bounded connects and calls, reconnect after a failure.

Every call of the shared store runs through :meth:`Session.run` under one ``threading.Lock``
(psycopg connections are not for concurrent use). The connection is in autocommit mode, so a
read is one statement and a write that needs more opens ``conn.transaction()`` explicitly.
Bounds, so that a hung or vanished server never blocks a caller forever:

- ``connect_timeout`` on the connect;
- ``statement_timeout`` on the session (10 s unless the caller says otherwise): the server
  cancels a statement, a lock wait included, that takes longer;
- the client's own bound on every call (``watchdog.py``): ``statement_timeout`` plus
  :data:`CLIENT_MARGIN`, for a server that hangs or a network that drops everything, where the
  server's own timeout cannot act;
- TCP keepalives (unless the connection string sets them) for a peer that vanished while idle.

A call that fails on a database error closes the connection and raises ``StoreUnavailable``
(trying again may work) or ``FinalError`` (the server refused the request itself), one line,
redacted; the next call connects again. Nothing here retries: the caller's loop decides when.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections.abc import Callable
from typing import Final, TypeVar

import psycopg
from psycopg import conninfo
from psycopg.rows import TupleRow

from orchestrator.clients.postgres.redact import redact
from orchestrator.clients.postgres.watchdog import bounded
from orchestrator.errors import FinalError, StoreUnavailable, XceprovError

STATEMENT_TIMEOUT: Final = 10.0
CLIENT_MARGIN: Final = 5.0  # the server's timeout acts first when it can: its message is clearer
# libpq's refusals of a connection option's value (``invalid sslmode value: "bogus"``, ``invalid
# integer value "x" for connection option "port"``, ``could not match 2 port numbers to 3 hosts``,
# ``weak sslmode ... may not be used with sslrootcert=system``), made before any network traffic:
# the same string meets them again on every try, so they are final, never an outage to wait out.
_OPTION_REFUSED: Final = re.compile(
    r"^(?:connection is bad: )?(?:invalid \S+(?: \S+)? value|could not match |weak sslmode)"
)
_KEEPALIVES: Final = {"keepalives": "1", "keepalives_idle": "5", "keepalives_interval": "2", "keepalives_count": "3"}

T = TypeVar("T")
Connection = psycopg.Connection[TupleRow]


def one_line(text: str) -> str:
    """``text`` on one line (libpq's messages span several)."""
    return " ".join(text.split())


def _cause(exc: BaseException, conn_str: str) -> str:
    return one_line(redact(str(exc), conn_str)) or type(exc).__name__


def unavailable(what: str, exc: BaseException, conn_str: str) -> StoreUnavailable:
    """The error for a failed ``what``: its cause on one line, the connection string redacted."""
    return StoreUnavailable(f"shared store: {what} failed: {_cause(exc, conn_str)}")


def failed(what: str, exc: psycopg.Error, conn_str: str, *, no_answer_within: float | None = None) -> XceprovError:
    """The error for a database error of ``what``: ``StoreUnavailable`` when trying again may
    work (the connection, an outage, a timeout, a lock or serialization conflict: psycopg's
    ``OperationalError`` and ``InterfaceError``), ``FinalError`` when the server refused the
    request itself (bad data, a missing table or privilege), which the same call would meet
    again. ``no_answer_within``: the client's bound cut the call after that many seconds."""
    if no_answer_within is not None:
        return StoreUnavailable(f"shared store: {what} failed: the server gave no answer within {no_answer_within:g} s")
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return unavailable(what, exc, conn_str)
    return FinalError(f"shared store: {what} refused by the server: {_cause(exc, conn_str)}")


def connect(conn_str: str, connect_timeout: float, statement_timeout: float) -> Connection:
    """A new autocommit connection with the session bounds set; ``StoreUnavailable`` when the
    server cannot be reached, ``FinalError`` when ``conn_str`` cannot be parsed."""
    try:
        params = conninfo.conninfo_to_dict(conn_str)
    except psycopg.Error as exc:
        # Not a temporary condition: retrying the same string fails the same way.
        raise FinalError(f"shared store: the connection string is malformed: {_cause(exc, conn_str)}") from None
    for key, value in _KEEPALIVES.items():
        params.setdefault(key, value)
    # libpq takes whole seconds; psycopg honours the same value for its own wait.
    params["connect_timeout"] = str(max(1, math.ceil(connect_timeout)))
    try:
        conn = psycopg.connect(conninfo.make_conninfo("", **params), autocommit=True)
    except psycopg.Error as exc:
        if _OPTION_REFUSED.match(str(exc)):
            raise FinalError(f"shared store: the connection string is refused: {_cause(exc, conn_str)}") from None
        raise unavailable("connect", exc, conn_str) from None
    try:
        with bounded(conn, statement_timeout + CLIENT_MARGIN) as watchdog:
            conn.execute(f"SET statement_timeout = {max(1, round(statement_timeout * 1000))}")
    except psycopg.Error as exc:
        conn.close()
        bound = watchdog.seconds if watchdog.fired else None
        raise failed("connect", exc, conn_str, no_answer_within=bound) from None
    return conn


def unreachable(conn_str: str, connect_timeout: float = 5.0) -> str | None:
    """Why the server cannot be reached now (one line, redacted), None when it answers.

    A connection string it refuses to parse, or a server that refuses the session, is no outage:
    None (the error that follows says what is wrong)."""
    try:
        conn = connect(conn_str, connect_timeout, STATEMENT_TIMEOUT)
    except StoreUnavailable as exc:
        return str(exc)
    except XceprovError:
        return None
    conn.close()
    return None


class Session:
    """A lazily (re)connected connection used by one caller at a time."""

    def __init__(self, conn_str: str, connect_timeout: float, statement_timeout: float = STATEMENT_TIMEOUT) -> None:
        self.conn_str = conn_str
        self.connect_timeout = connect_timeout
        self.statement_timeout = statement_timeout
        self._lock = threading.Lock()
        self._conn: Connection | None = None

    def run(self, what: str, work: Callable[[Connection], T]) -> T:
        """``work(conn)`` under the lock and the client's bound; a database error drops the
        connection (the next call connects again) and raises :func:`failed` naming ``what``.
        Errors of the toolkit (``LeaseLost``) pass as they are."""
        with self._lock:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.conn_str, self.connect_timeout, self.statement_timeout)
            try:
                with bounded(self._conn, self.statement_timeout + CLIENT_MARGIN) as watchdog:
                    return work(self._conn)
            except psycopg.Error as exc:
                self._drop()
                bound = watchdog.seconds if watchdog.fired else None
                raise failed(what, exc, self.conn_str, no_answer_within=bound) from None

    def _drop(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):  # already broken: closing only frees the socket
                self._conn.close()
            self._conn = None

    def close(self) -> None:
        """Close the connection (the next ``run`` would connect again)."""
        with self._lock:
            self._drop()
