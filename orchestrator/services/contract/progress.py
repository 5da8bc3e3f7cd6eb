"""``getRequestStatus``: where each request is, from the facts, the request records and its worker.

A create request's machines are the instances its op created (``instanceCreated``): the cloud
id, host name, address and launch time come from the fact (the launch time from the record when
the fact store keeps no commit time, as the standalone journal), the result from the bootstrap
outcome the worker recorded (``succeed`` when bootstrapped, or created when the request asked no
bootstrap; ``fail`` when the bootstrap failed, or a first-boot host failed its boot or never
joined by its deadline, its message then the host's step and words; ``executing`` while it runs). Keys of the op not
yet created are not listed as machines (they have no cloud id): the request is ``running``
while any is pending and its worker is at work. A return request's machines are those of its
``returning`` facts: ``executing`` (status ``terminating``) until ``returned`` (or ``lost``: the
cloud took it first), then ``succeed`` (status ``terminated``); and those its call left out
(a host the controller reported running work): ``fail``, status ``running``, with the reason.

The request is ``complete`` when every machine succeeded, ``complete_with_error`` when a machine
failed or an instance of the op was abandoned or lost before it was created; else ``running``.
Never terminal while its op is open (both schedulers stop asking once a request is complete,
with or without error): a request whose worker stopped with the op open is ``running``, the
message says why, and the poll starts its worker again (:func:`_restart`). A request id that
names no op of the cluster (nor a return whose every machine was left out) is answered on its
own, ``complete_with_error`` with the message ``Request not found`` and no machines, beside the
others. Every machine names its ``offering``: the one its op's intent placed it on, else its
template's default offering on the provider ("" for a ``select:`` template's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import instance_key
from orchestrator.model.text import printable
from orchestrator.ops.openops import open_ops
from orchestrator.reconcile.offers import default_names
from orchestrator.services.contract.ledger import Machine, machines, op_facts
from orchestrator.services.contract.requests import RequestRecord, valid_request_id
from orchestrator.services.contract.schemas import GetRequestStatusInput
from orchestrator.services.contract.session import ContractSession
from orchestrator.services.contract.worker import worker_alive

OK_OUTCOMES = ("ok", "changed")
FIRST_BOOT_FAILED = "failed: first boot "
NOT_FOUND = "Request not found"

FactsOf = Callable[[str], list[Fact]]


def _machine(m: Machine, result: str, status: str, message: str, launched: float) -> dict[str, Any]:
    return {
        "machineId": m.instance_id,
        "name": m.name,
        "result": result,
        "status": status,
        "privateIpAddress": m.address,
        "launchtime": int(m.created or launched),
        "message": printable(message),
        "offering": m.offering,
    }


def _bootstrap_result(m: Machine, record: RequestRecord | None, working: bool) -> tuple[str, str, str]:
    """(result, status, message) of a created machine of a create request."""
    if m.gone:
        return "succeed", "terminated" if m.gone == "returned" else "lost", f"instance {m.gone}"
    if record is None or not record.bootstrap:
        return "succeed", "running", "created"
    outcome = record.hosts.get(m.name)
    if outcome is None:
        if working:
            return "executing", "bootstrapping", "created; bootstrap pending"
        return "fail", "failed", f"created; no bootstrap outcome recorded ({record.message or 'worker ended'})"
    if outcome.split(":", 1)[0] in OK_OUTCOMES:
        return "succeed", "running", "bootstrapped"
    if outcome.startswith(FIRST_BOOT_FAILED):  # a first-boot host: its own words (model.firstboot)
        return "fail", "failed", outcome.removeprefix("failed: ")
    return "fail", "failed", f"bootstrap {outcome}"


def _create_status(
    request_id: str, facts: list[Fact], every: dict[str, Machine], record: RequestRecord | None
) -> dict[str, Any]:
    intent = next(f for f in facts if f.kind == FactKind.REQUEST_INTENT)
    keys = [instance_key(request_id, i) for i in range(intent.count)]
    gone_before = {f.instance_key: f for f in facts if f.kind in (FactKind.RETURNED, FactKind.LOST)}
    working = record is not None and worker_alive(record)
    out: list[dict[str, Any]] = []
    failed: list[str] = []
    pending = 0
    for key in keys:
        m = every.get(key)
        if m is None:
            if key in gone_before:
                failed.append(f"{key} {gone_before[key].kind} before it was created")
            else:
                pending += 1
            continue
        result, status, message = _bootstrap_result(m, record, working)
        if result == "fail":
            failed.append(f"{m.name}: {message}")
        launched = record.launched.get(m.name, 0.0) if record else 0.0
        out.append(_machine(m, result, status, message, launched))
    executing = any(m["result"] == "executing" for m in out)
    if pending and stopped(record):
        # Never terminal while the op is open: the poll starts its worker again (request_status).
        state = "running"
        message = f"{len(keys) - pending} of {len(keys)} machines created; {_restarted(record)}"
    elif (pending or executing) and (working or record is None or record.worker_state != "failed"):
        state = "running"
        message = f"{len(keys) - pending} of {len(keys)} machines created"
    elif failed:
        state, message = "complete_with_error", "; ".join(failed)
    else:
        state, message = "complete", f"{len(keys)} machines ready"
    return {"requestId": request_id, "status": state, "machines": out, "message": printable(message)}


def _return_status(
    request_id: str,
    facts: list[Fact],
    every: dict[str, Machine],
    record: RequestRecord | None,
    launches: Callable[[str, str], float],
) -> dict[str, Any]:
    returning = [f for f in facts if f.kind == FactKind.RETURNING]
    gone = {f.instance_key: f.kind for f in facts if f.kind in (FactKind.RETURNED, FactKind.LOST)}
    out: list[dict[str, Any]] = []
    for fact in returning:
        known = every.get(fact.instance_key)
        m = Machine(
            fact.provider,
            fact.instance_key,
            request_id,
            fact.template,
            fact.instance_id or (known.instance_id if known else ""),
            fact.host_name or (known.name if known else ""),
            known.address if known else "",
            known.created if known else 0.0,
        )
        # When it was launched is in the record of the request that created it (the standalone
        # journal keeps no commit times), not in the return's own.
        launched = launches(known.op_id, m.name) if known else 0.0
        if known is not None and known.gone == "lost":
            # The cloud took it back before the return deleted it: gone all the same.
            why = f"lost before its return ({known.lost_reason or 'the cloud no longer has it'})"
            out.append(_machine(m, "succeed", "terminated", why, launched))
        elif fact.instance_key in gone or (known is not None and known.gone):
            out.append(_machine(m, "succeed", "terminated", "returned", launched))
        else:
            out.append(_machine(m, "executing", "terminating", "returning", launched))
    refused = record.refused if record else {}
    for key, why in sorted(refused.items()):
        left_out = every.get(key)
        if left_out is not None:
            launched = launches(left_out.op_id, left_out.name)
            out.append(_machine(left_out, "fail", "running", f"not returned: {why}", launched))
    left = sum(1 for m in out if m["result"] == "executing")
    returned = len(returning) - left
    if left and stopped(record):
        # Never terminal while the op is open: the poll starts its worker again (request_status).
        state, message = "running", f"{returned} of {len(returning)} machines returned; {_restarted(record)}"
    elif left:
        state, message = "running", f"{returned} of {len(returning)} machines returned"
    elif refused:
        state = "complete_with_error"
        message = f"{returned} machines returned, {len(refused)} not returned: " + "; ".join(
            f"{m['name']}: {m['message']}" for m in out if m["result"] == "fail"
        )
    else:
        state, message = "complete", f"{len(out)} machines returned"
    return {"requestId": request_id, "status": state, "machines": out, "message": printable(message)}


def stopped(record: RequestRecord | None) -> bool:
    """Whether the request's worker stopped before the end of its op (it recorded its failure;
    a worker started again records ``running`` as it starts)."""
    return record is not None and record.worker_state == "failed"


def _restarted(record: RequestRecord | None) -> str:
    why = record.message if record else ""
    return f"the worker stopped ({why}) with the op open: started again"


def _restart(session: ContractSession, request_id: str, record: RequestRecord | None, facts: list[Fact]) -> None:
    """Start the worker of a request again when it stopped with its op still open: every accepted
    request is carried to its end by its own worker, and the scheduler polls until it is."""
    if stopped(record) and any(o.op_id == request_id for o in open_ops(facts)):
        session.spawn(request_id)  # a no-op while a worker of the request runs (its lock)


def request_status(session: ContractSession, document: GetRequestStatusInput) -> dict[str, Any]:
    """The ``getRequestStatus`` answer (see the module docstring)."""
    asked = list(dict.fromkeys(r.request_id for r in document.requests))
    if not any(valid_request_id(r) for r in asked):  # nothing to read: no id has the form of one
        return {"requests": [_not_found(r) for r in asked]}
    providers = sorted(session.loaded.config.providers)
    defaults = default_names(session.loaded.config)
    answers: list[dict[str, Any]] = []
    with session.reading() as ops:
        cache: dict[str, list[Fact]] = {}

        def facts_of(provider: str) -> list[Fact]:
            if provider not in cache:
                cache[provider] = ops.parts.facts.facts(provider)
            return cache[provider]

        creators: dict[str, RequestRecord | None] = {}

        def launches(op_id: str, name: str) -> float:
            if op_id not in creators:
                creators[op_id] = session.records.read(op_id)
            creator = creators[op_id]
            return creator.launched.get(name, 0.0) if creator else 0.0

        for request_id in asked:
            record = session.records.read(request_id)  # None for an id that is no op id
            where = [p for p in record.providers if p in providers] if record else providers
            mine = [f for p in where for f in op_facts(facts_of(p), request_id)] if valid_request_id(request_id) else []
            if not mine and not (record is not None and record.refused):  # a return of busy hosts only
                answers.append(_not_found(request_id))
                continue
            every = {k: m for p in where for k, m in machines(facts_of(p), defaults).items()}
            if any(f.kind == FactKind.REQUEST_INTENT for f in mine):
                answers.append(_create_status(request_id, mine, every, record))
            else:
                answers.append(_return_status(request_id, mine, every, record, launches))
            _restart(session, request_id, record, [f for p in where for f in facts_of(p)])
    return {"requests": answers}


def _not_found(request_id: str) -> dict[str, Any]:
    """The answer for an id that names no request: that id alone is in error, the others are
    answered (both consumers ask about many requests in one document)."""
    return {"requestId": request_id, "status": "complete_with_error", "machines": [], "message": NOT_FOUND}
