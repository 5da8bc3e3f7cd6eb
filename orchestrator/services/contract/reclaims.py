"""``getReturnRequests``: the machines the scheduler should close because they are going away.

Each machine is answered as the schedulers read it: ``machine`` (the host name), ``machineId``,
``gracePeriod`` (seconds until it goes; 0: gone or going now) and ``reason``. Two reasons:

* the cloud no longer has it, or is taking it back: the provider's tagged listing shows the
  instance terminated (with the cloud's own reason, ``spot-reclaim``, ``expired``, or another
  one such as ``out-of-band-delete``: the reason is answered as the listing gives it,
  ``terminated`` when it gives none), or a ``lost`` fact records it gone, or (for a machine the
  document names: the scheduler still holds it) an op that was no request of the scheduler
  returned it (``returned``: an operator's ``xceprov return``, a daemon); gracePeriod 0;
* its provider's ``max_lifetime`` is near: from launch + ``max_lifetime`` −
  ``policy.lifetime_lead`` on (the daemon's lifetime rule, ``reconcile.lifetime``), with the
  time left to launch + ``max_lifetime`` as the grace period. The launch time is the cloud's
  (the listing's), else the ``instanceCreated`` fact's commit time, else the time the contract's
  worker recorded the instance.

A machine in a return op the scheduler asked for (``requestReturnMachines``) is not listed: the
scheduler returned it. When the document names machines (the host factory sends those it
holds) only those are considered, and a name the facts do not know is counted in the message
(it is no machine of this cluster: answering it would only have its return refused);
otherwise every machine of the cluster, the gone ones only when contract requests created
them. Only reads: a listing whose shard an op is applying on is skipped (its machines are
judged by the facts).
"""

from __future__ import annotations

from typing import Any

import filelock

from orchestrator.errors import TerraformError
from orchestrator.model.text import printable
from orchestrator.ops.executor import Wired
from orchestrator.ops.hostloss import CLOUD_REASONS
from orchestrator.orphans.guards import launched_at
from orchestrator.services.contract.ledger import Machine, machines
from orchestrator.services.contract.schemas import GetReturnRequestsInput
from orchestrator.services.contract.session import ContractSession
from orchestrator.workspace.cloudview import CloudObject, read_listing

# How long a read waits for the listing shard's lock before it leaves the listing unread.
LISTING_WAIT = 2.0


def _listing(ops: Wired, provider: str) -> tuple[dict[str, CloudObject], str]:
    """The provider's tagged objects by cloud id, and "" or why they were not read."""
    workdir = ops.executor.workdir(provider)
    if not workdir.desired.exists():
        return {}, ""  # never used: nothing to list
    try:
        with workdir.lock(timeout=LISTING_WAIT):
            listing = read_listing(ops.parts.engine, workdir.path, workdir.labels)
    except filelock.Timeout:
        return {}, f"{provider}: listing not read (an op is applying)"
    except TerraformError as exc:
        return {}, f"{provider}: listing unreadable ({str(exc).splitlines()[0][:160]})"
    return (listing.by_id() if listing.supported else {}), ""


def _launch(m: Machine, seen: CloudObject | None, launched: dict[str, float]) -> float | None:
    cloud = launched_at(seen.launch_time) if seen is not None else None
    return cloud or m.created or launched.get(m.name) or None


def _entry(m: Machine, grace: float, reason: str) -> dict[str, Any]:
    return {"machine": m.name, "machineId": m.instance_id, "gracePeriod": max(0, int(grace)), "reason": reason}


def _gone(m: Machine, seen: CloudObject | None, named: bool) -> str:
    """Why the cloud no longer has ``m`` ("" while it has it, as far as the facts and listing say).

    ``returned`` (by an op that was no request of the scheduler) only when the scheduler named
    it: it says it still holds it; unnamed, every such machine would be listed for ever.
    """
    if m.gone == "lost":
        return "lost"
    if m.gone == "returned":
        return "returned" if named else ""
    if seen is not None and (seen.state == "terminated" or seen.state_reason in CLOUD_REASONS):
        return seen.state_reason or "terminated"
    return ""


def return_requests(session: ContractSession, document: GetReturnRequestsInput) -> dict[str, Any]:
    """The ``getReturnRequests`` answer (see the module docstring)."""
    config = session.loaded.config
    names = {m.name for m in document.machines}
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    known: set[str] = set()
    now = session.clock()
    with session.reading() as ops:
        for provider in sorted(config.providers):
            settings = config.providers[provider]
            every = list(machines(ops.parts.facts.facts(provider)).values())
            if names:
                every = [m for m in every if m.name in names]
                known.update(m.name for m in every)
            held = [m for m in every if not _returned_by_request(session, m, bool(names))]
            if not held:
                continue
            listed, note = _listing(ops, provider)
            if note:
                notes.append(note)
            for m in held:
                record = session.records.read(m.op_id)
                seen = listed.get(m.instance_id)
                why = _gone(m, seen, bool(names))
                if why:
                    # Unnamed, only the machines contract requests made (the scheduler's own).
                    if names or record is not None:
                        out.append(_entry(m, 0, why))
                    continue
                if m.gone or settings.max_lifetime is None:
                    continue
                launch = _launch(m, seen, record.launched if record else {})
                if launch is None:
                    continue
                end = launch + float(settings.max_lifetime)
                if now >= end - float(config.policy.lifetime_lead):
                    out.append(_entry(m, end - now, "max_lifetime"))
    unknown = len(names - known)
    if unknown:
        notes.append(f"{unknown} machines named are no machines of this cluster")
    message = f"{len(out)} machines to close and return" + (f" ({'; '.join(notes)})" if notes else "")
    return {"requests": out, "message": printable(message)}


def _returned_by_request(session: ContractSession, m: Machine, named: bool) -> bool:
    """Whether ``m`` is left out as being returned: unnamed, any machine in a return op; named,
    one in a return the scheduler asked for (a request of the contract's) or in another op's
    return still deleting it (once that one is done, the scheduler that holds it is told)."""
    if not m.returning_op:
        return False
    if not named:
        return True
    return not m.gone or session.records.read(m.returning_op) is not None
