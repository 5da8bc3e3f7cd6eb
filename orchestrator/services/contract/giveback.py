"""``requestReturnMachines``: one return op per request; its op id is the request id.

Machines are named by host name (and cloud id, when given: both must match one instance the
facts know as created by this cluster). Under the fence of their providers the call commits the
op's intent, one ``returning`` fact per machine, records the request, releases the fence and
starts the request's worker (while a create is open on one of the providers the call waits for
it first, outside the fence: :mod:`.turns`), which completes the op with resume's return path (the keys leave
the desired sets, the deletion is planned, checked and applied, ``returned`` is committed). The
scheduler closed its hosts before it asked, so the return neither drains them nor runs the
decommission play.

A machine already in a return op is not returned twice: it is left out of the new op, and a
request whose every machine is already returning answers the (oldest) op that returns them. A
machine the cloud already took (``lost``) is accepted: its ``returning`` fact records that the
scheduler let it go, and its op is complete at once; one the cloud took since (a spot reclaim)
is recorded lost by the worker's host-loss path. A name or id the facts do not know refuses the
whole request (``unknown_request``, exit 1, nothing changed).

A machine whose host the controller reports running work (``busy``, ``closing``: what
``xceprov destroy`` refuses) is left out of the op unless the document says ``"force": true``;
the request's record keeps why (``refused``), its status answers it ``fail`` with the reason,
and the audit log has ``op-return-refused`` (or ``op-return-forced``). Every machine busy: the
request has a record and no op, and nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from orchestrator.errors import ContractRefused
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.instances import new_op_id
from orchestrator.model.text import printable
from orchestrator.ops.drain import host_map
from orchestrator.ops.executor import OpParts
from orchestrator.ops.hosts import BUSY_STATES
from orchestrator.services.contract.ledger import Machine, machines
from orchestrator.services.contract.requests import RequestRecord
from orchestrator.services.contract.schemas import MachineRef, RequestReturnMachinesInput
from orchestrator.services.contract.session import ContractSession
from orchestrator.services.contract.turns import Turn

ACTION = "requestReturnMachines"


def named(parts: OpParts, providers: Sequence[str], refs: Sequence[MachineRef]) -> list[Machine]:
    """The machines ``refs`` name (by name, and cloud id when given); unknown ones refused."""
    every = [m for p in providers for m in machines(parts.facts.facts(p)).values()]
    found: list[Machine] = []
    unknown: list[str] = []
    for ref in refs:
        match = [m for m in every if m.name == ref.name and (not ref.machine_id or m.instance_id == ref.machine_id)]
        if not match:
            unknown.append(ref.name + (f" ({ref.machine_id})" if ref.machine_id else ""))
            continue
        # The newest instance of that name (a name is never reused by two live instances).
        chosen = max(match, key=lambda m: (m.gone == "", m.created, m.key))
        if chosen not in found:
            found.append(chosen)
    if unknown:
        shown = ", ".join(printable(u)[:120] for u in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise ContractRefused(f"{ACTION}: no machine {shown} in this cluster", "unknown_request")
    return found


def return_machines(session: ContractSession, document: RequestReturnMachinesInput) -> dict[str, str]:
    """The ``requestReturnMachines`` answer (see the module docstring)."""
    every_provider = sorted(session.loaded.config.providers)
    with session.reading() as reader:
        providers = sorted({m.provider for m in named(reader.parts, every_provider, document.machines)})
    turn = Turn(session, providers, "return")
    while True:
        with session.fenced(providers) as (_executor, parts):
            chosen = named(parts, providers, document.machines)
            already = sorted({m.returning_op for m in chosen if m.returning_op})
            todo = [m for m in chosen if not m.returning_op]
            if not todo:
                op_id = already[0]
                return {"requestId": op_id, "message": f"every machine named is already returned by request {op_id}"}
            blocking = turn.blocking([parts.facts.facts(p) for p in providers])
            if not blocking:
                op_id = new_op_id(session.clock())
                refused = _busy(parts, op_id, todo, document.force)
                todo = [m for m in todo if m.key not in refused]
                _commit(session, parts, op_id, todo, chosen, refused)
                break
        turn.wait(blocking)  # a create is open on a provider: its worker applies it first
    if any(not m.gone for m in todo):
        session.spawn(op_id)
    skipped = f"; {len(chosen) - len(todo) - len(refused)} already returning ({', '.join(already)})" if already else ""
    left_out = f"; {len(refused)} not returned, their hosts run work (busy): see getRequestStatus" if refused else ""
    return {
        "requestId": op_id,
        "message": f"{len(todo)} machines returning{skipped}{left_out}; poll getRequestStatus",
    }


def _busy(parts: OpParts, op_id: str, todo: Sequence[Machine], force: bool) -> dict[str, str]:
    """The machines of ``todo`` whose host the controller reports running work, by key: why each
    is not returned (none when ``force``: returned all the same). Audited either way, as
    ``xceprov destroy`` refuses or forces the same hosts (``ops.drain.settle_hosts``)."""
    busy: dict[str, str] = {}
    for provider in sorted({m.provider for m in todo}):
        known = host_map(parts, provider)  # standalone: no controller, no host known
        mine: list[str] = []
        for m in (m for m in todo if m.provider == provider and not m.gone):
            host = known.get(m.key) or known.get(m.instance_id)
            if host is not None and host.state in BUSY_STATES:
                mine.append(m.key)
                busy[m.key] = (
                    f"the controller reports host {host.host_name or m.name} {host.state} (running work); "
                    'close it and ask again, or send "force": true to return it anyway'
                )
        if mine:
            action = "op-return-forced" if force else "op-return-refused"
            parts.recorder.audit(
                action, provider=provider, op=op_id, busy=sorted(mine), reason=f"{ACTION}, force {force}"
            )
    return {} if force else busy


def _commit(
    session: ContractSession,
    parts: OpParts,
    op_id: str,
    todo: Sequence[Machine],
    chosen: Sequence[Machine],
    refused: dict[str, str],
) -> None:
    """The return op ``op_id`` of ``todo``: one ``returning`` fact per machine and the request's
    record, with the machines ``refused`` (the fence is held)."""
    now = session.clock()
    for provider in sorted({m.provider for m in todo}):
        epoch = parts.recorder.gate(provider, op_id, "returning facts")
        parts.recorder.commit_many(
            [
                Fact(
                    FactKind.RETURNING,
                    provider,
                    op_id,
                    epoch,
                    instance_key=m.key,
                    instance_id=m.instance_id,
                    template=m.template,
                    host_name=m.name,
                )
                for m in todo
                if m.provider == provider
            ]
        )
    mine = tuple(sorted({m.provider for m in chosen if m.key in refused or m in todo}))
    record = RequestRecord(op_id, "return", mine, now, bootstrap=False, refused=dict(refused))
    if not todo:  # every machine refused: no op, no worker; the record is the whole request
        record = replace(record, worker_state="done", message="no machine returned")
    session.records.write(record)
