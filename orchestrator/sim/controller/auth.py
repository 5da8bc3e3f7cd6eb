"""Who may send what: the per-role allowlist and the credential checks of the two joins.

Roles come from credentials, never from what a client says about itself (docs/protocol.md,
"Authentication and roles"):

- **provisioner**: a client certificate of the cluster CA naming ``xce://provisioner/<id>``;
  ``<id>`` is the lease holder and the ``holder`` of its facts;
- **admin**: the admin Unix socket (its file permissions), or a client certificate naming
  ``xce://admin/<id>`` (the connection is in the admin role from the handshake on, no join);
- **worker**: no client certificate of those roles, and a join token valid for the instance
  key and host name it joins with (``orchestrator.protocol.jointoken``); whether it is expired
  or used is the core's to say (``core.ControllerCore.join_worker``: it needs the records).
"""

from __future__ import annotations

from typing import Final

from orchestrator.protocol.jointoken import TokenProblem, check_token
from orchestrator.protocol.schema import ADMIN_REQUESTS
from orchestrator.sim.controller.state import ErrorV, Session

JOINS: Final = frozenset({"joinProvisioner", "joinWorker"})
PROVISIONER_REQUESTS: Final = frozenset(
    {
        "leaseAcquire", "leaseRenew", "leaseRelease", "commitFact", "commitFacts", "queryFacts",
        "hostClose", "hostNotice", "hostDecommission", "hostStatus", "requestDemand", "queryStatus",
        "reportReasons",
    }
)  # fmt: skip
WORKER_REQUESTS: Final = frozenset({"heartbeat"})
ADMIN_ALLOWED: Final = ADMIN_REQUESTS | {"queryStatus", "requestDemand"}
# The allowlist: what a joined connection of each role may send (joins are handled apart).
ROLE_REQUESTS: Final = {
    "provisioner": PROVISIONER_REQUESTS,
    "worker": WORKER_REQUESTS,
    "admin": ADMIN_ALLOWED,
}


def refusal(session: Session, kind: str) -> ErrorV | None:
    """Why ``session`` may not send ``kind`` now (``None``: allowed). Joins are checked apart."""
    if kind in JOINS:
        if session.role:
            return ErrorV("invalid", "already joined")
        return None
    if not session.role:
        if kind in ADMIN_REQUESTS:
            return ErrorV("permissionDenied", f"{kind} needs the admin role (admin socket or admin certificate)")
        return ErrorV("notJoined", f"{kind} before join")
    if kind not in ROLE_REQUESTS.get(session.role, frozenset()):
        return ErrorV("permissionDenied", f"{kind} is not allowed for the {session.role} role")
    return None


def provisioner_holder(session: Session) -> str | ErrorV:
    """The lease holder a provisioner join authenticates, from its client certificate."""
    if session.cert_role != "provisioner":
        what = f"a {session.cert_role} certificate" if session.cert_role else "no client certificate naming a role"
        return ErrorV(
            "permissionDenied", f"joinProvisioner needs a provisioner client certificate; the peer presented {what}"
        )
    return session.cert_identity


def token_refusal(host_name: str, code: str, message: str) -> ErrorV:
    """A refused worker join: ``error(refused)`` whose message starts with its reason code."""
    return ErrorV("refused", f"{code}: host {host_name!r}: {message}")


def worker_refusal(session: Session, join_key: bytes, instance_key: str, host_name: str, token: str) -> ErrorV | int:
    """Why a worker join with these values is refused, else the expiry of its valid token."""
    if session.cert_role:
        return ErrorV("permissionDenied", f"a {session.cert_role} certificate cannot join as a worker")
    if not join_key:
        return ErrorV("refused", "this controller has no join key: worker joins are disabled")
    checked = check_token(join_key, instance_key, host_name, token)
    if isinstance(checked, TokenProblem):
        return token_refusal(host_name, checked.code, checked.message)
    return checked
