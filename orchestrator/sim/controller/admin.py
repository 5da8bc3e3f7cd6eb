"""The admin channel's client: one request over ``<state-dir>/controller.sock``.

Same framing and ``Envelope`` as the TLS protocol, no join, no TLS: the socket file is 0600, so
only its owner can reach it (docs/protocol.md §9).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from orchestrator.errors import ControllerError
from orchestrator.protocol.framing import encode, new_envelope, open_envelope, recv_frame, send_frame

SOCKET_NAME: Final = "controller.sock"
_ids = itertools.count(1)


@contextlib.contextmanager
def unix_path(path: Path) -> Iterator[str]:
    """A name for ``path`` that fits ``sun_path`` (108 bytes), for bind and connect.

    Deep state directories (test temporary directories, for one) overflow it; then the socket
    is reached through ``/proc/self/fd/<directory fd>/<name>``, which resolves to the same file.
    """
    text = str(path)
    if len(text.encode()) < 100:
        yield text
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def admin_socket(state_dir: Path) -> Path:
    """Where the admin socket of a controller with this state directory is."""
    return state_dir / SOCKET_NAME


@dataclass(frozen=True)
class AdminResult:
    """An admin reply."""

    message: str
    term: int
    work_id: int = 0


def _request(state_dir: Path, fill: Callable[[Any], None], read: Callable[[Any], Any], timeout: float) -> Any:
    path = admin_socket(state_dir)
    env = new_envelope(next(_ids))
    fill(env)
    data = encode(env)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            with unix_path(path) as name:
                s.connect(name)
            send_frame(s, data)
            while True:
                frame = recv_frame(s)
                with open_envelope(frame) as reply:
                    if int(reply.requestId) == 0:
                        continue  # not expected on the admin channel; ignore pushes
                    kind = str(reply.which())
                    if kind == "error":
                        raise ControllerError(f"controller: {reply.error.message}")
                    return read(reply)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise ControllerError(f"no simulated controller is running ({path}: {exc.strerror})") from exc
    except TimeoutError as exc:
        raise ControllerError(f"the simulated controller did not answer within {timeout:g}s ({path})") from exc
    except OSError as exc:
        raise ControllerError(f"admin channel {path}: {exc}") from exc


def _admin_result(reply: Any) -> AdminResult:
    a = reply.adminReply
    return AdminResult(str(a.message), int(a.term), int(a.workId))


def failover(state_dir: Path, timeout: float = 10.0) -> AdminResult:
    """Bump the term and drop every connection."""

    def fill(env: Any) -> None:
        env.adminFailover = None

    return _request(state_dir, fill, _admin_result, timeout)  # type: ignore[no-any-return]


def submit(state_dir: Path, template: str, hosts: int, duration: float, timeout: float = 10.0) -> AdminResult:
    """Add pending work: ``hosts`` workers of ``template`` for ``duration`` seconds."""

    def fill(env: Any) -> None:
        s = env.init("adminSubmit")
        s.template = template
        s.hosts = hosts
        s.durationMs = int(duration * 1000)

    return _request(state_dir, fill, _admin_result, timeout)  # type: ignore[no-any-return]


def revoke(state_dir: Path, provider: str, reason: str = "", timeout: float = 10.0) -> AdminResult:
    """Revoke a provider's lease."""

    def fill(env: Any) -> None:
        r = env.init("adminRevoke")
        r.provider = provider
        r.reason = reason

    return _request(state_dir, fill, _admin_result, timeout)  # type: ignore[no-any-return]


def shutdown(state_dir: Path, timeout: float = 10.0) -> AdminResult:
    """Stop the controller."""

    def fill(env: Any) -> None:
        env.adminShutdown = None

    return _request(state_dir, fill, _admin_result, timeout)  # type: ignore[no-any-return]


def _epoch(e: Any) -> str:
    return f"{int(e.term)}.{int(e.seq)}"


def status(state_dir: Path, timeout: float = 10.0) -> dict[str, Any]:
    """The controller's status as plain data (term, leases, demand, hosts, work counts)."""

    def fill(env: Any) -> None:
        env.queryStatus = None

    def read(reply: Any) -> dict[str, Any]:
        s = reply.status
        return {
            "controller_id": str(s.controllerId),
            "term": int(s.term),
            "term_started_ms": int(s.termStartedMs),
            "primary": str(s.primary),
            "connections": int(s.connections),
            "pending_work": int(s.pendingWork),
            "running_work": int(s.runningWork),
            "leases": [
                {
                    "provider": str(x.provider),
                    "holder": str(x.holder),
                    "epoch": _epoch(x.epoch),
                    "expires_in": int(x.expiresInMs) / 1000.0,
                    "grace_ends_in": int(x.graceEndsInMs) / 1000.0,
                }
                for x in s.leases
            ],
            "demand": {
                "seq": int(s.demand.seq),
                "templates": [
                    {
                        "template": str(t.template),
                        "wanted": int(t.wanted),
                        "pending_hosts": int(t.pendingHosts),
                        "in_flight": int(t.inFlight),
                        "joined": int(t.joined),
                        "idle": int(t.idle),
                        "busy": int(t.busy),
                    }
                    for t in s.demand.templates
                ],
            },
            "hosts": [
                {
                    "host_name": str(h.hostName),
                    "instance_id": str(h.instanceId),
                    "provider": str(h.provider),
                    "template": str(h.template),
                    "state": str(h.state),
                    "reclaim_at_ms": int(h.reclaimAtUnixMs),
                }
                for h in s.hosts
            ],
            # The latest reason per template the provisioners reported (reportReasons).
            "reasons": [
                {
                    "template": str(r.template),
                    "code": str(r.code),
                    "provider": str(r.provider),
                    "until": int(r.untilUnixMs) / 1000.0 if int(r.untilUnixMs) else None,
                    "detail": str(r.detail),
                }
                for r in s.reasons
            ],
        }

    return _request(state_dir, fill, read, timeout)  # type: ignore[no-any-return]
