"""Request dispatch: one decoded ``Envelope`` from a session → one reply (plus any pushes).

Runs under the core lock so that a reply and the pushes it causes leave in a consistent order
(``joined`` before the first demand snapshot). Raises :class:`WrongMessageType` for messages
that are not requests; the server drops the connection for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.protocol.framing import WrongMessageType, which
from orchestrator.protocol.holder import holder_key, instance_refusal
from orchestrator.protocol.schema import ADMIN_REQUESTS, MAX_BATCH_FACTS, REQUESTS
from orchestrator.sim.controller import auth, wire
from orchestrator.sim.controller.clock import to_ms
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.reasons import TemplateReasonV
from orchestrator.sim.controller.state import ErrorV, Host, RejectV, Session


def _text(value: Any) -> str:
    return str(value)


def handle(
    core: ControllerCore,
    session: Session,
    env: Any,
    *,
    on_shutdown: Callable[[], None] | None = None,
) -> None:
    """Serve one request; the reply goes out through ``session.send``."""
    kind = which(env)
    rid = int(env.requestId)
    if kind not in REQUESTS:
        raise WrongMessageType(kind, "a request")
    if rid == 0:
        raise WrongMessageType(kind, "a request with a non-zero requestId")
    with core.lock:
        session.last_seen = core.clock.monotonic()
        if core.redirect and session.role != "admin" and kind not in ADMIN_REQUESTS:
            # A standby serves nothing and changes nothing: every client is sent to the primary.
            msg = f"not the primary; the primary is {core.redirect}"
            if kind in ("commitFact", "commitFacts"):
                session.send(wire.reply_reject(rid, RejectV("notPrimary", msg, redirect=core.redirect)))
            else:
                session.send(wire.reply_error(rid, ErrorV("notPrimary", msg, redirect=core.redirect)))
            return
        refused = auth.refusal(session, kind)
        if refused is not None:
            session.send(wire.reply_error(rid, refused))
            return
        if session.role == "admin":
            _admin(core, session, rid, kind, env, on_shutdown)
            return
        if kind == "joinProvisioner":
            _join_provisioner(core, session, rid, env.joinProvisioner)
        elif kind == "joinWorker":
            _join_worker(core, session, rid, env.joinWorker)
        elif session.role == "worker":
            session.send(wire.reply_ok(rid))  # heartbeat: the only worker request
        else:
            _provisioner(core, session, rid, kind, env)


def _join_provisioner(core: ControllerCore, session: Session, rid: int, r: Any) -> None:
    holder = auth.provisioner_holder(session)
    if isinstance(holder, ErrorV):
        session.send(wire.reply_error(rid, holder))
        return
    # The lease holder is the certificate's identity and the join's process instance (legacy
    # joins send none: the identity alone); the instanceId sent is informational.
    instance = _text(r.leaseInstance)
    refused = instance_refusal(instance)
    if refused is not None:
        session.send(wire.reply_error(rid, ErrorV("invalid", refused)))
        return
    session.role = "provisioner"
    session.instance_id = holder_key(holder, instance)
    session.providers = frozenset(_text(p) for p in r.providers)
    session.send(_joined(core, rid, "provisioner"))
    # Level-triggered demand: every join gets the whole picture at once (resync).
    core.update_demand(force_to=session)


def _joined(core: ControllerCore, rid: int, role: str, host_state: str = "unknown") -> bytes:
    """The ``joined`` reply: the controller's term, primary, heartbeat and lease TTL."""
    return wire.reply_joined(
        rid,
        role=role,
        term=core.term,
        primary=core.primary,
        controller_id=core.controller_id,
        heartbeat_ms=to_ms(core.heartbeat_interval),
        ttl_ms=to_ms(core.ttl),
        now_ms=to_ms(core.clock.wall()),
        host_state=host_state,
    )


def _join_worker(core: ControllerCore, session: Session, rid: int, r: Any) -> None:
    host_name, instance_key = _text(r.hostName), _text(r.instanceKey)
    expires = auth.worker_refusal(session, core.join_key, instance_key, host_name, _text(r.joinToken))
    if isinstance(expires, ErrorV):
        session.send(wire.reply_error(rid, expires))
        return
    extra = {"address": _text(r.address), "op_id": _text(r.opId)}
    result = core.join_worker(
        session,
        host_name,
        _text(r.instanceId),
        _text(r.template),
        extra,
        credential_key=instance_key,
        token_expires=expires,
    )
    if isinstance(result, ErrorV):
        session.send(wire.reply_error(rid, result))
        return
    session.send(_joined(core, rid, "worker", host_state=result.state()))
    core.run_workload()
    core.update_demand()


def _provisioner(core: ControllerCore, session: Session, rid: int, kind: str, env: Any) -> None:
    holder = session.instance_id
    if kind in ("leaseAcquire", "leaseRenew", "leaseRelease"):
        r = getattr(env, kind)
        provider = _text(r.provider)
        if not provider:
            session.send(wire.reply_error(rid, ErrorV("invalid", f"{kind} needs provider")))
            return
        epoch = wire.epoch_of(r.epoch)
        if kind == "leaseAcquire":
            session.send(wire.reply_lease(rid, core.acquire(holder, provider)))
        elif kind == "leaseRenew":
            session.send(wire.reply_lease(rid, core.renew(holder, provider, epoch)))
        else:
            denied = core.release(holder, provider, epoch)
            session.send(wire.reply_ok(rid) if denied is None else wire.reply_lease(rid, denied))
    elif kind == "commitFact":
        result = core.commit_fact(holder, wire.fact_from_reader(env.commitFact))
        if isinstance(result, RejectV):
            session.send(wire.reply_reject(rid, result))
        else:
            session.send(wire.reply_ack(rid, result.fact_id, result.committed_ms))
    elif kind == "commitFacts":
        _commit_facts(core, session, rid, env.commitFacts)
    elif kind == "queryFacts":
        q = env.queryFacts
        provider = _text(q.provider)
        if not provider:
            session.send(wire.reply_error(rid, ErrorV("invalid", "queryFacts needs provider")))
            return
        facts, more = core.query_facts(provider, int(q.afterFactId), int(q.limit))
        session.send(wire.reply_facts(rid, provider, facts, more))
    elif kind in ("hostClose", "hostDecommission"):
        ref = getattr(env, kind)
        provider, iid, name = _text(ref.provider), _text(ref.instanceId), _text(ref.hostName)
        if not provider or not (iid or name):
            session.send(wire.reply_error(rid, ErrorV("invalid", f"{kind} needs provider and instanceId or hostName")))
            return
        epoch = wire.epoch_of(ref.epoch)
        outcome: str | RejectV | ErrorV
        if kind == "hostClose":
            outcome = core.close_host(holder, provider, epoch, iid, name)
        else:
            reason = _text(ref.reason)
            outcome = core.decommission_host(holder, provider, epoch, iid, name, reason, force=bool(ref.force))
        if isinstance(outcome, RejectV):
            session.send(wire.reply_reject(rid, outcome))
        elif isinstance(outcome, ErrorV):
            session.send(wire.reply_error(rid, outcome))
        else:  # the host's state after the request: closed, closing or decommissioned
            session.send(wire.reply_ack(rid, 0, to_ms(core.clock.wall()), outcome))
    elif kind == "hostNotice":
        _host_notice(core, session, rid, env.hostNotice)
    elif kind == "hostStatus":
        q = env.hostStatus
        hosts: list[Host] = core.host_list(_text(q.provider), _text(q.template))
        session.send(wire.reply_hosts(rid, hosts))
    elif kind == "requestDemand":
        session.send(wire.demand_message(rid, core.demand()))
    elif kind == "queryStatus":
        session.send(core.status_frame(rid))
    elif kind == "reportReasons":
        reasons = [
            TemplateReasonV(
                _text(r.template), _text(r.code), _text(r.detail), _text(r.provider), int(r.untilUnixMs), holder
            )
            for r in env.reportReasons.reasons
        ]
        core.reasons.report(holder, reasons)
        session.send(wire.reply_ok(rid))


def _host_notice(core: ControllerCore, session: Session, rid: int, n: Any) -> None:
    provider, iid, name = _text(n.provider), _text(n.instanceId), _text(n.hostName)
    reclaim_ms = int(n.reclaimAtUnixMs)
    if not provider or not (iid or name) or reclaim_ms <= 0:
        msg = "hostNotice needs provider, instanceId or hostName, and reclaimAtUnixMs"
        session.send(wire.reply_error(rid, ErrorV("invalid", msg)))
        return
    outcome = core.notice_host(session.instance_id, provider, wire.epoch_of(n.epoch), iid, name, reclaim_ms)
    if isinstance(outcome, RejectV):
        session.send(wire.reply_reject(rid, outcome))
    elif isinstance(outcome, ErrorV):
        session.send(wire.reply_error(rid, outcome))
    else:
        session.send(wire.reply_ack(rid, 0, to_ms(core.clock.wall()), outcome))


def _commit_facts(core: ControllerCore, session: Session, rid: int, batch: Any) -> None:
    # The length is read before any element is: a list over the limit costs nothing to refuse.
    count = len(batch.facts)
    if count > MAX_BATCH_FACTS:
        msg = f"commitFacts holds {count} facts, more than {MAX_BATCH_FACTS}; nothing was committed"
        session.send(wire.reply_error(rid, ErrorV("invalid", msg)))
        return
    result = core.commit_facts(session.instance_id, [wire.fact_from_reader(f) for f in batch.facts])
    if isinstance(result, RejectV):
        session.send(wire.reply_reject(rid, result))
    else:
        session.send(wire.reply_committed(rid, result))


def _admin(
    core: ControllerCore,
    session: Session,
    rid: int,
    kind: str,
    env: Any,
    on_shutdown: Callable[[], None] | None,
) -> None:
    if kind == "adminFailover":
        term = core.failover()
        session.send(wire.reply_admin(rid, f"failover: term is now {term}; every connection dropped", term))
    elif kind == "adminSubmit":
        s = env.adminSubmit
        template, hosts, duration_ms = _text(s.template), int(s.hosts), int(s.durationMs)
        if not template or hosts <= 0:
            session.send(wire.reply_error(rid, ErrorV("invalid", "submit needs a template and hosts > 0")))
            return
        wid = core.submit(template, hosts, duration_ms / 1000.0)
        session.send(
            wire.reply_admin(
                rid,
                f"work {wid}: {hosts} host(s) of {template!r} for {duration_ms / 1000:g}s",
                core.term,
                wid,
            )
        )
    elif kind == "adminRevoke":
        r = env.adminRevoke
        provider = _text(r.provider)
        done = core.revoke(provider, _text(r.reason) or "revoked by admin")
        msg = f"lease of {provider!r} revoked" if done else f"no valid lease of {provider!r}"
        session.send(wire.reply_admin(rid, msg, core.term))
    elif kind == "adminShutdown":
        session.send(wire.reply_admin(rid, "shutting down", core.term))
        if on_shutdown is not None:
            on_shutdown()
    elif kind == "queryStatus":
        session.send(core.status_frame(rid))
    elif kind == "requestDemand":
        session.send(wire.demand_message(rid, core.demand()))
