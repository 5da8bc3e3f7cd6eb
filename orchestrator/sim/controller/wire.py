"""Conversions between the controller's plain values and ``Envelope`` messages.

Builders return finished frame bodies (bytes), so nothing outside this module holds a pycapnp
object; readers are only used inside ``open_envelope`` blocks.
"""

from __future__ import annotations

from typing import Any

from orchestrator.model.facts import FactKind
from orchestrator.protocol.framing import encode, new_envelope
from orchestrator.sim.controller.reasons import TemplateReasonV
from orchestrator.sim.controller.state import (
    DemandV,
    Epoch,
    ErrorV,
    Host,
    LeaseDenyV,
    LeaseGrantV,
    LeaseInfoV,
    RejectV,
)
from orchestrator.sim.controller.store import FactRecord


def epoch_of(reader: Any) -> Epoch:
    """An ``Epoch`` reader as a tuple."""
    return (int(reader.term), int(reader.seq))


def _set_epoch(builder: Any, epoch: Epoch) -> None:
    builder.term = epoch[0]
    builder.seq = epoch[1]


def fact_from_reader(r: Any) -> FactRecord:
    """A ``Fact`` reader as a record (controller-set fields left at zero)."""
    return FactRecord(
        kind=FactKind(str(r.kind)), provider=str(r.provider), op_id=str(r.opId),
        term=int(r.epoch.term), seq=int(r.epoch.seq), instance_key=str(r.instanceKey),
        instance_id=str(r.instanceId), template=str(r.template), host_name=str(r.hostName),
        address=str(r.address), count=int(r.count), join_deadline_ms=int(r.joinDeadlineUnixMs),
        detail=str(r.detail),
    )  # fmt: skip


def fill_fact(b: Any, f: FactRecord) -> None:
    """Fill a ``Fact`` builder."""
    b.kind = f.kind
    b.provider = f.provider
    b.opId = f.op_id
    _set_epoch(b.epoch, (f.term, f.seq))
    b.instanceKey = f.instance_key
    b.instanceId = f.instance_id
    b.template = f.template
    b.hostName = f.host_name
    b.address = f.address
    b.count = f.count
    b.joinDeadlineUnixMs = f.join_deadline_ms
    b.detail = f.detail
    b.factId = f.fact_id
    b.committedUnixMs = f.committed_ms
    b.holder = f.holder


def fill_host(b: Any, h: Host) -> None:
    """Fill a ``HostInfo`` builder."""
    b.hostName = h.host_name
    b.instanceId = h.instance_id
    b.instanceKey = h.instance_key
    b.opId = h.op_id
    b.provider = h.provider
    b.template = h.template
    b.address = h.address
    b.state = h.state()
    b.idleSinceUnixMs = h.idle_since_ms if h.state() in ("idle", "closed") else 0
    b.joinDeadlineUnixMs = h.join_deadline_ms
    b.joinedUnixMs = h.joined_ms
    b.reclaimAtUnixMs = h.reclaim_at_ms


def fill_demand(b: Any, d: DemandV) -> None:
    """Fill a ``DemandSnapshot`` builder."""
    b.seq = d.seq
    b.term = d.term
    b.timeUnixMs = d.time_ms
    lst = b.init("templates", len(d.templates))
    for i, t in enumerate(d.templates):
        e = lst[i]
        e.template = t.template
        e.wanted = t.wanted
        e.pendingHosts = t.pending_hosts
        e.inFlight = t.in_flight
        e.joined = t.joined
        e.idle = t.idle
        e.busy = t.busy


def fill_lease_info(b: Any, info: LeaseInfoV) -> None:
    """Fill a ``LeaseInfo`` builder."""
    b.provider = info.provider
    b.holder = info.holder
    _set_epoch(b.epoch, info.epoch)
    b.expiresInMs = info.expires_in_ms
    b.graceEndsInMs = info.grace_ends_in_ms


# -- replies ---------------------------------------------------------------------------------


def reply_error(rid: int, err: ErrorV) -> bytes:
    """``error`` reply."""
    env = new_envelope(rid)
    e = env.init("error")
    e.code = err.code
    e.message = err.message
    e.redirect = err.redirect
    return encode(env)


def reply_reject(rid: int, rej: RejectV) -> bytes:
    """``reject`` reply."""
    env = new_envelope(rid)
    r = env.init("reject")
    r.reason = rej.reason
    r.message = rej.message
    r.redirect = rej.redirect
    _set_epoch(r.currentEpoch, rej.current_epoch)
    return encode(env)


def reply_ack(rid: int, fact_id: int, committed_ms: int, host_state: str = "unknown") -> bytes:
    """``ack`` reply (``host_state``: the host's state after hostClose/hostDecommission)."""
    env = new_envelope(rid)
    a = env.init("ack")
    a.factId = fact_id
    a.committedUnixMs = committed_ms
    a.hostState = host_state
    return encode(env)


def reply_ok(rid: int) -> bytes:
    """``ok`` reply."""
    env = new_envelope(rid)
    env.ok = None
    return encode(env)


def reply_lease(rid: int, result: LeaseGrantV | LeaseDenyV) -> bytes:
    """``leaseGrant`` or ``leaseDeny`` reply."""
    env = new_envelope(rid)
    if isinstance(result, LeaseGrantV):
        g = env.init("leaseGrant")
        g.provider = result.provider
        _set_epoch(g.epoch, result.epoch)
        g.ttlMs = result.ttl_ms
        g.holder = result.holder
    else:
        d = env.init("leaseDeny")
        d.provider = result.provider
        d.holder = result.holder
        d.retryAfterMs = result.retry_after_ms
        d.reason = result.reason
    return encode(env)


def reply_joined(
    rid: int,
    *,
    role: str,
    term: int,
    primary: str,
    controller_id: str,
    heartbeat_ms: int,
    ttl_ms: int,
    now_ms: int,
    host_state: str = "unknown",
) -> bytes:
    """``joined`` reply."""
    env = new_envelope(rid)
    j = env.init("joined")
    j.role = role
    j.term = term
    j.primary = primary
    j.controllerId = controller_id
    j.heartbeatIntervalMs = heartbeat_ms
    j.leaseTtlMs = ttl_ms
    j.serverTimeUnixMs = now_ms
    j.hostState = host_state
    return encode(env)


def reply_facts(rid: int, provider: str, facts: list[FactRecord], more: bool) -> bytes:
    """``factList`` reply."""
    env = new_envelope(rid)
    fl = env.init("factList")
    fl.provider = provider
    lst = fl.init("facts", len(facts))
    for i, f in enumerate(facts):
        fill_fact(lst[i], f)
    fl.more = more
    return encode(env)


def reply_committed(rid: int, facts: list[FactRecord]) -> bytes:
    """``committed`` reply to ``commitFacts``."""
    env = new_envelope(rid)
    lst = env.init("committed").init("facts", len(facts))
    for i, f in enumerate(facts):
        fill_fact(lst[i], f)
    return encode(env)


def reply_hosts(rid: int, hosts: list[Host]) -> bytes:
    """``hostList`` reply."""
    env = new_envelope(rid)
    hl = env.init("hostList")
    lst = hl.init("hosts", len(hosts))
    for i, h in enumerate(hosts):
        fill_host(lst[i], h)
    return encode(env)


def reply_status(
    rid: int,
    *,
    controller_id: str,
    term: int,
    term_started_ms: int,
    primary: str,
    leases: list[LeaseInfoV],
    demand: DemandV,
    hosts: list[Host],
    connections: int,
    pending: int,
    running: int,
    reasons: list[TemplateReasonV] | None = None,
) -> bytes:
    """``status`` reply."""
    env = new_envelope(rid)
    s = env.init("status")
    s.controllerId = controller_id
    s.term = term
    s.termStartedMs = term_started_ms
    s.primary = primary
    ll = s.init("leases", len(leases))
    for i, info in enumerate(leases):
        fill_lease_info(ll[i], info)
    fill_demand(s.demand, demand)
    hl = s.init("hosts", len(hosts))
    for i, h in enumerate(hosts):
        fill_host(hl[i], h)
    s.connections = connections
    s.pendingWork = pending
    s.runningWork = running
    rl = s.init("reasons", len(reasons or []))
    for i, r in enumerate(reasons or []):
        rl[i].template, rl[i].code, rl[i].detail, rl[i].provider = r.template, r.code, r.detail, r.provider
        rl[i].untilUnixMs = r.until_ms
    return encode(env)


def reply_admin(rid: int, message: str, term: int, work_id: int = 0) -> bytes:
    """``adminReply`` reply."""
    env = new_envelope(rid)
    a = env.init("adminReply")
    a.message = message
    a.term = term
    a.workId = work_id
    return encode(env)


def demand_message(rid: int, d: DemandV) -> bytes:
    """``demand``: a push (``rid`` 0) or the reply to ``requestDemand``."""
    env = new_envelope(rid)
    fill_demand(env.init("demand"), d)
    return encode(env)


# -- pushes ----------------------------------------------------------------------------------


def push_host_event(kind: str, host: Host, time_ms: int) -> bytes:
    """``hostEvent`` push."""
    env = new_envelope(0)
    ev = env.init("hostEvent")
    ev.kind = kind
    fill_host(ev.host, host)
    ev.timeUnixMs = time_ms
    return encode(env)


def push_lease_revoked(provider: str, epoch: Epoch, reason: str) -> bytes:
    """``leaseRevoked`` push."""
    env = new_envelope(0)
    r = env.init("leaseRevoked")
    r.provider = provider
    _set_epoch(r.epoch, epoch)
    r.reason = reason
    return encode(env)


def push_worker_stop(reason: str) -> bytes:
    """``workerStop`` push."""
    env = new_envelope(0)
    env.init("workerStop").reason = reason
    return encode(env)
