"""``requestMachines``: one create op per request; its op id is the request id.

Under the provider's fence (``session.ContractSession.fenced``) the call checks the request
against the facts, then records the op's intent (:meth:`Executor.place`: the ``requestIntent``
fact and the desired sets grown by its instances) and the request's record, releases the fence
and starts the request's worker, which applies the op (resume) and bootstraps its hosts. The
call itself never waits for Terraform's apply of its own op; it does wait, outside the fence,
while another op of the provider is open (:mod:`.turns`: one op placed at a time, so each
worker's checked plan creates exactly its own op's keys), and is refused ``held`` when that
takes longer than the session's ``fence_wait``.

Idempotency: a request is the same as an earlier one when it carries the same ``clientToken``
(however late), or, without a token, when it asks the same templateId and machineCount within
:data:`SAME_DOCUMENT_WINDOW` seconds of that earlier one (a retry of a call whose answer was
lost). The key (a digest of the token, or of the canonical request) and the time are in the
intent fact's ``detail``, so every process reading the facts sees them; the check and the
commit are made under the same fence, so two identical calls at once make one op. The same
request answers the first one's request id and starts its worker again when its op is still
open and no worker of it is alive.
"""

from __future__ import annotations

import hashlib
import json

from orchestrator.errors import ContractRefused
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import new_op_id
from orchestrator.ops.openops import open_ops
from orchestrator.services.contract.catalogue import max_number, resolve, template_id
from orchestrator.services.contract.ledger import CONTRACT_DETAIL, contract_detail, live_keys
from orchestrator.services.contract.requests import RequestRecord
from orchestrator.services.contract.schemas import RequestMachinesInput
from orchestrator.services.contract.session import ContractSession
from orchestrator.services.contract.turns import Turn
from orchestrator.services.contract.worker import worker_alive

ACTION = "requestMachines"
# Without a clientToken, the same templateId and count within this many seconds is one request.
SAME_DOCUMENT_WINDOW = 60.0


def idempotency_key(document: RequestMachinesInput, template: str, provider: str) -> tuple[str, bool]:
    """The request's key and whether it is the caller's token (else a digest of the document)."""
    if document.client_token is not None:
        return "token:" + hashlib.sha256(document.client_token.encode()).hexdigest()[:32], True
    canonical = json.dumps(
        {"templateId": template_id(template, provider), "machineCount": document.template.machine_count},
        sort_keys=True,
    )
    return "document:" + hashlib.sha256(canonical.encode()).hexdigest()[:32], False


def earlier_request(facts: list[Fact], key: str, by_token: bool, now: float) -> str | None:
    """The op id of an earlier request with ``key`` (within the window unless by token)."""
    for fact in reversed(facts):
        if fact.kind != FactKind.REQUEST_INTENT:
            continue
        part = contract_detail(fact.detail)
        if part.get("key") != key:
            continue
        at = part.get("at")
        if by_token or (isinstance(at, int | float) and 0 <= now - at <= SAME_DOCUMENT_WINDOW):
            return fact.op_id
    return None


def room(facts: list[Fact], session: ContractSession, template: str, provider: str) -> int:
    """How many more instances of ``template`` ``provider`` may have (its limits less what lives)."""
    config = session.loaded.config
    on_provider = config.providers[provider].max_instances - len(live_keys(facts))
    of_template = max_number(config, template, provider) - len(live_keys(facts, template))
    return max(0, min(on_provider, of_template))


def request_machines(session: ContractSession, document: RequestMachinesInput) -> dict[str, str]:
    """The ``requestMachines`` answer (see the module docstring)."""
    config = session.loaded.config
    template, provider = resolve(config, document.template.template_id)
    count = document.template.machine_count
    key, by_token = idempotency_key(document, template, provider)
    tid = template_id(template, provider)
    record: RequestRecord | None = None
    still_open = True
    turn = Turn(session, [provider], "create")
    while True:
        with session.fenced([provider]) as executor:
            facts = executor.facts.facts(provider)
            now = session.clock()
            same = earlier_request(facts, key, by_token, now)
            blocking = turn.blocking([facts]) if same is None else []
            if same is None and not blocking:
                left = room(facts, session, template, provider)
                if count > left:
                    raise ContractRefused(
                        f"{ACTION}: {count} machines of {tid} asked, {left} more fit "
                        f"(maxNumber {max_number(config, template, provider)}, "
                        f"provider {provider} max_instances {config.providers[provider].max_instances})"
                    )
                op_id = new_op_id(now)
                detail = json.dumps({CONTRACT_DETAIL: {"action": ACTION, "key": key, "at": now}}, sort_keys=True)
                executor.place(provider, template, count, op_id, detail)
                session.records.write(RequestRecord(op_id, "create", (provider,), now, bootstrap=session.bootstrap))
            elif same is not None:
                op_id = same
                still_open = any(o.op_id == op_id for o in open_ops(facts))
                record = session.records.read(op_id)
                if record is None:  # the first call ended between its intent and its record
                    record = RequestRecord(op_id, "create", (provider,), now, bootstrap=session.bootstrap)
                    session.records.write(record)
        if not blocking:
            break
        turn.wait(blocking)  # another op is open on the provider: its worker applies it first
    if same is not None:
        if still_open and (record is None or not worker_alive(record)):
            session.spawn(op_id)
        why = "the same clientToken" if by_token else f"the same request within {SAME_DOCUMENT_WINDOW:.0f}s"
        return {"requestId": op_id, "message": f"{why} as request {op_id}: no new op"}
    session.spawn(op_id)
    return {
        "requestId": op_id,
        "message": f"{count} machines of {tid} requested on provider {provider}; poll getRequestStatus",
    }
