"""Request/reply futures: every request carries an id and gets exactly one reply.

``call`` sends a request on a connection and waits for its reply with the request timeout. A
timeout, a connection that drops mid-request or a closed connection raise ``ControllerError``
(retryable), never a hang; a timed-out request also drops the connection, since its stream can
no longer be trusted to be in step. An ``error`` reply becomes the matching exception.
"""

from __future__ import annotations

import itertools
import logging
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from orchestrator.clients.controller.transport import Connection
from orchestrator.errors import ControllerError, FinalError
from orchestrator.protocol import framing
from orchestrator.protocol.schema import Envelope

log = logging.getLogger(__name__)

Reply = tuple[str, Any]


class Unsupported(FinalError):
    """The controller does not serve this request (``error(unsupported)``: an older version)."""


class NotPrimary(ControllerError):
    """The controller answered ``error(notPrimary)``: ``redirect`` names the primary ("" unknown)."""

    def __init__(self, address: str, redirect: str) -> None:
        super().__init__(f"controller {address} is not the primary ({redirect or 'unknown'})")
        self.redirect = redirect


class PendingRequests:
    """The outstanding requests, by id, each with the connection it went out on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[Future[Reply], Connection]] = {}

    def call(self, conn: Connection, kind: str, body: Any, timeout: float) -> Reply:
        """Send ``kind`` on ``conn`` and wait for its reply: ``(reply member, payload dict)``."""
        fut: Future[Reply] = Future()
        with self._lock:
            request_id = next(self._ids)
            self._pending[request_id] = (fut, conn)
        try:
            env = Envelope.new_message(requestId=request_id, **{kind: body})
            conn.send(framing.encode(env))
        except ControllerError:
            self._forget(request_id)
            raise
        try:
            reply_kind, payload = fut.result(timeout)
        except FutureTimeout:
            self._forget(request_id)
            conn.close(f"no reply to {kind} within {timeout:.1f}s")
            conn.closed.wait(1.0)  # so that the link already says disconnected when we raise
            raise ControllerError(
                f"no reply from the controller at {conn.address} within {timeout:.1f}s to {kind}"
            ) from None
        if reply_kind == "error":
            payload = payload or {}
            code = str(payload.get("code", ""))
            message = str(payload.get("message", ""))
            if code == "notPrimary":
                raise NotPrimary(conn.address, str(payload.get("redirect", "")))
            if code in ("internal", "notJoined"):
                raise ControllerError(f"controller error on {kind}: {code}: {message}")
            if code == "unsupported":
                raise Unsupported(f"controller refused {kind}: {code}: {message}")
            raise FinalError(f"controller refused {kind}: {code}: {message}")
        return reply_kind, payload

    def complete(self, request_id: int, reply: Reply) -> bool:
        """Hand ``reply`` to the waiting request; False when none waits (a late reply)."""
        with self._lock:
            entry = self._pending.pop(request_id, None)
        if entry is None:
            return False
        entry[0].set_result(reply)
        return True

    def fail(self, conn: Connection, reason: str) -> None:
        """The connection ``conn`` closed: every request waiting on it fails at once."""
        with self._lock:
            failed = [rid for rid, (_, c) in self._pending.items() if c is conn]
            futures = [self._pending.pop(rid)[0] for rid in failed]
        for fut in futures:
            if not fut.done():
                fut.set_exception(
                    ControllerError(f"connection to the controller at {conn.address} lost mid-request: {reason}")
                )

    def _forget(self, request_id: int) -> None:
        with self._lock:
            self._pending.pop(request_id, None)
