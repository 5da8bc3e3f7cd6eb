"""Helpers for driving the simulated controller's core directly (no sockets), with a fake clock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from orchestrator.protocol.framing import open_envelope
from orchestrator.sim.controller.clock import FakeClock
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.state import LeaseDenyV, LeaseGrantV, Session
from orchestrator.sim.controller.store import ControllerStore, FactRecord

TTL = 15.0


@dataclass
class FakeConn:
    """A session whose frames are kept for inspection."""

    sid: int
    frames: list[bytes] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)

    def session(self, **kw: Any) -> Session:
        """The core's view of this connection."""
        return Session(sid=self.sid, peer=f"fake-{self.sid}", send=self.frames.append, close=self.closed.append, **kw)

    def pushes(self, kind: str) -> list[dict[str, Any]]:
        """The pushes of ``kind`` received so far, as plain dicts."""
        out = []
        for f in self.frames:
            with open_envelope(f) as env:
                if env.requestId == 0 and env.which() == kind:
                    out.append(getattr(env, kind).to_dict())
        return out


def new_core(store: ControllerStore, clock: FakeClock) -> ControllerCore:
    """A core over ``store`` as the tests use it (a restart is another one over the same store)."""
    return ControllerCore(store, clock, ttl=TTL, check_interval=1.0, heartbeat_interval=5.0)


def grant(result: LeaseGrantV | LeaseDenyV) -> LeaseGrantV:
    """``result``, asserted to be a grant."""
    assert isinstance(result, LeaseGrantV), result
    return result


def fact(provider: str, epoch: tuple[int, int], kind: str = "requestIntent", op: str = "op-1", **kw: Any) -> FactRecord:
    """A fact to commit."""
    return FactRecord(kind=kind, provider=provider, op_id=op, term=epoch[0], seq=epoch[1], **kw)


def worker(
    core: ControllerCore,
    sid: int,
    name: str,
    instance_id: str = "",
    template: str = "cpu",
    *,
    credential_key: str | None = None,
    token_expires: int | None = None,
) -> Any:
    """Join a worker: ``(conn, session, Host or ErrorV)`` (``token_expires``: the expiry of the
    verified token it presents, unix seconds)."""
    conn = FakeConn(sid)
    s = conn.session()
    core.add_session(s)
    result = core.join_worker(
        s, name, instance_id, template, {}, credential_key=credential_key, token_expires=token_expires
    )
    core.run_workload()
    core.update_demand()
    return conn, s, result


def demand_of(core: ControllerCore, template: str) -> dict[str, int]:
    """The current demand of one template (zeros when it is not in the picture)."""
    for t in core.demand().templates:
        if t.template == template:
            return {
                "wanted": t.wanted,
                "idle": t.idle,
                "busy": t.busy,
                "in_flight": t.in_flight,
                "joined": t.joined,
            }
    return {"wanted": 0, "idle": 0, "busy": 0, "in_flight": 0, "joined": 0}
