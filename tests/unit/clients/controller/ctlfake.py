"""A scriptable in-process TLS controller for the link's unit tests (loopback only)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.protocol import framing
from orchestrator.protocol.schema import Envelope

# A handler gets (member, payload dict, connection) and returns (reply member, payload),
# "drop" to close the connection, or None to never answer.
Handler = Callable[[str, Any, "FakeConn"], "tuple[str, Any] | str | None"]


@dataclass
class FakeConn:
    sock: ssl.SSLSocket
    lock: threading.Lock = field(default_factory=threading.Lock)
    request_id: int = 0  # of the request being handled (for a handler that answers itself)
    lease_instance: str = ""  # the join's leaseInstance: grants name the holder "me/<instance>"

    def send(self, request_id: int, member: str, payload: Any) -> None:
        env = Envelope.new_message(requestId=request_id, **{member: payload})
        with self.lock:
            framing.send_frame(self.sock, env.to_bytes())

    def push(self, member: str, payload: Any) -> None:
        self.send(0, member, payload)

    def drop(self) -> None:
        """Cut the connection; the thread serving it closes the socket when its read fails.

        Never closed here: that thread may be inside OpenSSL on the socket's descriptor, which
        OpenSSL keeps by number; closed, the number soon belongs to another socket (the next
        test's), whose bytes that thread would then read or write (seen as the next test's TLS
        failing with "bad record mac" or "unexpected message").
        """
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)


class FakeController:
    """Answers the provisioner protocol with defaults; tests override members in ``handlers``."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self.ctx = ctx
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.handlers: dict[str, Handler] = {}
        self.seen: list[str] = []
        self.conns: list[FakeConn] = []
        self.term = 1
        self.seq = 0
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            sock = self.ctx.wrap_socket(raw, server_side=True)
        except (OSError, ssl.SSLError):
            raw.close()
            return
        conn = FakeConn(sock)
        self.conns.append(conn)
        try:
            while True:
                data = framing.recv_frame(sock)
                with framing.open_envelope(data) as env:
                    member = framing.which(env)
                    payload = env.to_dict().get(member)
                    rid = int(env.requestId)
                self.seen.append(member)
                conn.request_id = rid
                answer = self.handlers.get(member, self.default)(member, payload, conn)
                if answer == "drop":
                    conn.drop()
                    return
                if isinstance(answer, tuple):
                    conn.send(rid, answer[0], answer[1])
        except (OSError, framing.FrameError, ssl.SSLError):
            pass
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def default(self, member: str, payload: Any, conn: FakeConn) -> tuple[str, Any]:
        if member == "joinProvisioner":
            conn.lease_instance = str(payload.get("leaseInstance", ""))
            return "joined", {
                "role": "provisioner",
                "term": self.term,
                "primary": self.address,
                "controllerId": "fake",
                "leaseTtlMs": 15000,
            }
        if member in ("leaseAcquire", "leaseRenew"):
            self.seq += 1
            epoch = {"term": self.term, "seq": self.seq}
            holder = f"me/{conn.lease_instance}" if conn.lease_instance else "me"
            grant = {"provider": payload["provider"], "epoch": epoch, "ttlMs": 15000, "holder": holder}
            return "leaseGrant", grant
        if member == "leaseRelease":
            return "ok", None
        if member == "requestDemand":
            return "demand", {"seq": 1, "term": self.term, "templates": [{"template": "cpu", "wanted": 2}]}
        if member == "queryFacts":
            return "factList", {
                "provider": payload["provider"],
                "facts": [
                    {
                        "kind": "requestIntent",
                        "provider": payload["provider"],
                        "opId": "op-1",
                        "epoch": {"term": 1, "seq": 1},
                        "factId": 7,
                        "count": 2,
                        "template": "cpu",
                    }
                ],
            }
        if member == "hostStatus":
            return "hostList", {"hosts": [{"hostName": "cpu-1", "state": "idle"}]}
        if member == "commitFact":
            return "ack", {"factId": 9}
        return "error", {"code": "unsupported", "message": member}

    def drop_all(self) -> None:
        for conn in list(self.conns):
            conn.drop()
        self.conns.clear()

    def close(self) -> None:
        self._stop = True
        self.listener.close()
        self.drop_all()


def wait_for(predicate: Callable[[], object], timeout: float = 30.0) -> bool:
    """Poll ``predicate`` until it is true; False when ``timeout`` passes first."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def record_joins(fake: FakeController) -> list[FakeConn]:
    """Answer joins as usual and append every joined connection to the returned list."""
    conns: list[FakeConn] = []

    def joined(member: str, payload: Any, conn: FakeConn) -> tuple[str, Any]:
        conns.append(conn)
        return fake.default(member, payload, conn)

    fake.handlers["joinProvisioner"] = joined
    return conns


@dataclass
class Pki:
    ca: Path
    other_ca: Path
    server_ctx: ssl.SSLContext
