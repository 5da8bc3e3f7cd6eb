"""Conversions between protocol messages (as plain dicts) and the link's typed values.

:func:`read_frame` decodes a frame body into a plain dict on the I/O thread, within the limits
of ``orchestrator.protocol.decode`` (docs/protocol.md, "Limits"): whatever a frame holds, its
conversion costs bounded memory and time, and a frame over a limit is a protocol error that
drops the connection. The other functions turn such dicts into the frozen dataclasses of
``types`` and build the dicts that ``Envelope.new_message`` takes. Unset pointer fields are
left out of the dicts, so every read has a default. Wire times are milliseconds; the types use
seconds.

An enum value this version does not know (``decode.UnknownEnum``, from a newer controller) is
skipped here, never an error (docs/protocol.md, "Values this version does not know"): a fact of
an unknown kind and a host event of an unknown kind are left out, a host in an unknown state is
in state ``unknown``. ``read_frame`` reports each such value to its caller, who warns and counts.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from orchestrator.clients.controller.types import (
    ControllerStatus,
    DemandSnapshot,
    Epoch,
    Fact,
    HostEvent,
    HostInfo,
    LeaseDenied,
    LeaseGrant,
    LeaseInfo,
    LeaseRevoked,
    TemplateDemand,
    TemplateReason,
)
from orchestrator.errors import ControllerError
from orchestrator.model.facts import FactKind
from orchestrator.protocol import framing
from orchestrator.protocol.decode import DEFAULT_LIMITS, DecodeLimits, Sighting, UnknownEnum, to_plain

Dict = dict[str, Any]


def read_frame(
    body: bytes,
    *,
    skip_pushes: Container[str] = (),
    limits: DecodeLimits = DEFAULT_LIMITS,
    unknown: list[Sighting] | None = None,
) -> tuple[int, str, Any] | None:
    """``(requestId, member, payload dict)`` of a frame; None for a push in ``skip_pushes``,
    which is dropped after reading its type, without converting it. Raises ``FrameError``.
    Every enum value this version does not know is appended to ``unknown``."""
    with framing.open_envelope(body) as env:
        kind = framing.which(env)
        request_id = int(env.requestId)
        if request_id == 0 and kind in skip_pushes:
            return None
        data = to_plain(env, limits, frame_bytes=len(body), unknown=unknown)
    return request_id, kind, data.get(kind)


def _s(d: Dict, key: str) -> str:
    return str(d.get(key, "") or "")


def _i(d: Dict, key: str) -> int:
    return int(d.get(key, 0) or 0)


def _sec(d: Dict, key: str) -> float:
    return _i(d, key) / 1000.0


def epoch_of(d: Dict | None) -> Epoch:
    """An ``Epoch`` from its dict ((0, 0) when absent)."""
    d = d or {}
    return Epoch(_i(d, "term"), _i(d, "seq"))


def epoch_dict(epoch: Epoch | None) -> Dict:
    """The wire dict of an epoch ((0, 0) for none)."""
    return {"term": epoch.term, "seq": epoch.seq} if epoch is not None else {"term": 0, "seq": 0}


def lease_grant(d: Dict) -> LeaseGrant:
    """A ``leaseGrant`` reply."""
    return LeaseGrant(_s(d, "provider"), epoch_of(d.get("epoch")), _sec(d, "ttlMs"), _s(d, "holder"))


def lease_deny(d: Dict) -> LeaseDenied:
    """A ``leaseDeny`` reply."""
    return LeaseDenied(_s(d, "provider"), _s(d, "holder"), _sec(d, "retryAfterMs"), _s(d, "reason"))


def lease_revoked(d: Dict) -> LeaseRevoked:
    """A ``leaseRevoked`` push."""
    epoch = epoch_of(d.get("epoch"))
    return LeaseRevoked(_s(d, "provider"), epoch if epoch != Epoch(0, 0) else None, _s(d, "reason"))


def demand(d: Dict) -> DemandSnapshot:
    """A ``demand`` snapshot (push or reply)."""
    return DemandSnapshot(
        seq=_i(d, "seq"),
        term=_i(d, "term"),
        time=_sec(d, "timeUnixMs"),
        templates=tuple(
            TemplateDemand(
                template=_s(t, "template"),
                wanted=_i(t, "wanted"),
                pending_hosts=_i(t, "pendingHosts"),
                in_flight=_i(t, "inFlight"),
                joined=_i(t, "joined"),
                idle=_i(t, "idle"),
                busy=_i(t, "busy"),
            )
            for t in d.get("templates", [])
        ),
    )


def host_info(d: Dict) -> HostInfo:
    """A ``HostInfo``."""
    state = d.get("state")
    return HostInfo(
        host_name=_s(d, "hostName"),
        state="unknown" if isinstance(state, UnknownEnum) else str(state or "unknown"),
        instance_id=_s(d, "instanceId"),
        instance_key=_s(d, "instanceKey"),
        op_id=_s(d, "opId"),
        provider=_s(d, "provider"),
        template=_s(d, "template"),
        address=_s(d, "address"),
        idle_since=_sec(d, "idleSinceUnixMs"),
        join_deadline=_sec(d, "joinDeadlineUnixMs"),
        joined_at=_sec(d, "joinedUnixMs"),
        reclaim_at=_sec(d, "reclaimAtUnixMs"),
    )


def host_event(d: Dict) -> HostEvent | None:
    """A ``hostEvent`` push; None for an event of a kind this version does not know (skipped)."""
    if isinstance(d.get("kind"), UnknownEnum):
        return None
    return HostEvent(_s(d, "kind"), host_info(d.get("host", {})), _sec(d, "timeUnixMs"))


def known_kind(d: Dict) -> bool:
    """Whether a fact dict is of a kind this version knows (the others are skipped)."""
    return not isinstance(d.get("kind"), UnknownEnum)


def fact(d: Dict) -> Fact:
    """A committed ``Fact``; ``ControllerError`` for a kind this version does not know (a
    reader of fact lists skips those first, with :func:`known_kind`)."""
    kind = d.get("kind")
    if isinstance(kind, UnknownEnum):
        raise ControllerError(f"controller answered with a fact of kind {int(kind)}, unknown to this version")
    return Fact(
        kind=FactKind(_s(d, "kind")),
        provider=_s(d, "provider"),
        op_id=_s(d, "opId"),
        epoch=epoch_of(d.get("epoch")),
        instance_key=_s(d, "instanceKey"),
        instance_id=_s(d, "instanceId"),
        template=_s(d, "template"),
        host_name=_s(d, "hostName"),
        address=_s(d, "address"),
        count=_i(d, "count"),
        join_deadline=_sec(d, "joinDeadlineUnixMs"),
        detail=_s(d, "detail"),
        fact_id=_i(d, "factId"),
        committed=_sec(d, "committedUnixMs"),
        holder=_s(d, "holder"),
    )


def fact_dict(f: Fact) -> Dict:
    """The wire dict of a fact to commit (controller-set fields left out)."""
    return {
        "kind": f.kind,
        "provider": f.provider,
        "opId": f.op_id,
        "epoch": epoch_dict(f.epoch),
        "instanceKey": f.instance_key,
        "instanceId": f.instance_id,
        "template": f.template,
        "hostName": f.host_name,
        "address": f.address,
        "count": f.count,
        "joinDeadlineUnixMs": int(f.join_deadline * 1000),
        "detail": f.detail,
    }


def controller_status(d: Dict) -> ControllerStatus:
    """A ``status`` reply."""
    return ControllerStatus(
        controller_id=_s(d, "controllerId"),
        term=_i(d, "term"),
        primary=_s(d, "primary"),
        leases=tuple(
            LeaseInfo(
                provider=_s(x, "provider"),
                holder=_s(x, "holder"),
                epoch=epoch_of(x.get("epoch")),
                expires_in=_sec(x, "expiresInMs"),
                grace_ends_in=_sec(x, "graceEndsInMs"),
            )
            for x in d.get("leases", [])
        ),
        demand=demand(d.get("demand", {})),
        hosts=tuple(host_info(h) for h in d.get("hosts", [])),
        connections=_i(d, "connections"),
        pending_work=_i(d, "pendingWork"),
        running_work=_i(d, "runningWork"),
        term_started=_sec(d, "termStartedMs"),
        reasons=tuple(template_reason(r) for r in d.get("reasons", [])),
    )


def template_reason(d: Dict) -> TemplateReason:
    """A ``TemplateReason`` (``untilUnixMs`` 0: not known)."""
    until = _i(d, "untilUnixMs")
    return TemplateReason(_s(d, "template"), _s(d, "code"), _s(d, "detail"), _s(d, "provider"), until / 1000.0 or None)


def template_reason_dict(r: TemplateReason) -> Dict:
    """The ``TemplateReason`` struct of ``r``."""
    until = int(r.until * 1000) if r.until is not None else 0
    return {"template": r.template, "code": r.code, "detail": r.detail, "provider": r.provider, "untilUnixMs": until}
