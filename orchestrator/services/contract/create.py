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
(however late): a caller that retries a call whose answer was lost sends its token again.
Without a token every call is a new request, as with every provider LSF's resource connector
and a Symphony host factory call (neither sends a token; two asks of the same template and
count a moment apart are two genuine asks). The key (a digest of the token) and the time are
in the intent fact's ``detail``, so every process reading the facts sees them; the check and
the commit are made under the same fence, so two calls with one token at once make one op.
The same request answers the first one's request id and starts its worker again when its op
is still open and no worker of it is alive.
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


def idempotency_key(document: RequestMachinesInput) -> str | None:
    """The request's key: a digest of the caller's token; None without one (a new request)."""
    if document.client_token is None:
        return None
    return "token:" + hashlib.sha256(document.client_token.encode()).hexdigest()[:32]


def earlier_request(facts: list[Fact], key: str) -> str | None:
    """The op id of an earlier request with ``key``."""
    for fact in reversed(facts):
        if fact.kind == FactKind.REQUEST_INTENT and contract_detail(fact.detail).get("key") == key:
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
    template, provider = resolve(config, document.template.template_id, session.consumer)
    count = document.template.machine_count
    key = idempotency_key(document)
    tid = template_id(template, provider, session.consumer)
    record: RequestRecord | None = None
    still_open = True
    turn = Turn(session, [provider], "create")
    while True:
        with session.fenced([provider]) as (executor, parts):
            facts = parts.facts.facts(provider)
            now = session.clock()
            same = earlier_request(facts, key) if key is not None else None
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
                part = {"action": ACTION, "at": now, **({"key": key} if key is not None else {})}
                detail = json.dumps({CONTRACT_DETAIL: part}, sort_keys=True)
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
        return {"requestId": op_id, "message": f"the same clientToken as request {op_id}: no new op"}
    session.spawn(op_id)
    return {
        "requestId": op_id,
        "message": f"{count} machines of {tid} requested on provider {provider}; poll getRequestStatus",
    }
