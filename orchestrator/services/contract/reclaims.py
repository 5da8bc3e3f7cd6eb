"""``getReturnRequests``: the machines the scheduler should close because they are going away.

Two reasons, each machine with a ``gracePeriod`` (seconds until it goes; 0: gone or going now):

* the cloud took it back: the provider's tagged listing shows the instance terminated with the
  cloud's own reason (``spot-reclaim``, ``expired``), or a ``lost`` fact records it gone;
* its provider's ``max_lifetime`` is near: from launch + ``max_lifetime`` −
  ``policy.lifetime_lead`` on (the daemon's lifetime rule, ``reconcile.lifetime``), with the
  time left to launch + ``max_lifetime`` as the grace period. The launch time is the cloud's
  (the listing's), else the ``instanceCreated`` fact's commit time, else the time the contract's
  worker recorded the instance.

A machine already in a return op is not listed (the scheduler returned it). When the document
names machines (the host factory sends those it holds) only those are considered; otherwise
every live machine of the cluster, and the lost ones that contract requests created. Only reads:
a listing whose shard an op is applying on is skipped (its machines are judged by the facts).
"""

from __future__ import annotations

from typing import Any

import filelock

from orchestrator.errors import TerraformError
from orchestrator.model.text import printable
from orchestrator.ops.executor import Executor
from orchestrator.ops.hostloss import CLOUD_REASONS
from orchestrator.orphans.guards import launched_at
from orchestrator.services.contract.ledger import Machine, machines
from orchestrator.services.contract.schemas import GetReturnRequestsInput
from orchestrator.services.contract.session import ContractSession
from orchestrator.workspace.cloudview import CloudObject, read_listing

# How long a read waits for the listing shard's lock before it leaves the listing unread.
LISTING_WAIT = 2.0


def _listing(executor: Executor, provider: str) -> tuple[dict[str, CloudObject], str]:
    """The provider's tagged objects by cloud id, and "" or why they were not read."""
    workdir = executor.workdir(provider)
    if not workdir.desired.exists():
        return {}, ""  # never used: nothing to list
    try:
        with workdir.lock(timeout=LISTING_WAIT):
            listing = read_listing(executor.engine, workdir.path)
    except filelock.Timeout:
        return {}, f"{provider}: listing not read (an op is applying)"
    except TerraformError as exc:
        return {}, f"{provider}: listing unreadable ({str(exc).splitlines()[0][:160]})"
    return (listing.by_id() if listing.supported else {}), ""


def _launch(m: Machine, seen: CloudObject | None, launched: dict[str, float]) -> float | None:
    cloud = launched_at(seen.launch_time) if seen is not None else None
    return cloud or m.created or launched.get(m.name) or None


def _entry(m: Machine, grace: float, reason: str) -> dict[str, Any]:
    return {"machineId": m.instance_id, "name": m.name, "gracePeriod": max(0, int(grace)), "reason": reason}


def return_requests(session: ContractSession, document: GetReturnRequestsInput) -> dict[str, Any]:
    """The ``getReturnRequests`` answer (see the module docstring)."""
    config = session.loaded.config
    named = {(m.name, m.machine_id or "") for m in document.machines}
    names = {n for n, _ in named}
    out: list[dict[str, Any]] = []
    notes: list[str] = []
    now = session.clock()
    with session.reading() as executor:
        for provider in sorted(config.providers):
            settings = config.providers[provider]
            held = [m for m in machines(executor.facts.facts(provider)).values() if not m.returning_op]
            if names:
                held = [m for m in held if m.name in names]
            if not held:
                continue
            listed, note = _listing(executor, provider)
            if note:
                notes.append(note)
            for m in held:
                record = session.records.read(m.op_id)
                seen = listed.get(m.instance_id)
                if m.gone == "lost" or (seen is not None and seen.state_reason in CLOUD_REASONS):
                    if names or record is not None:
                        reason = seen.state_reason if seen is not None and seen.state_reason else "lost"
                        out.append(_entry(m, 0, reason))
                    continue
                if m.gone or settings.max_lifetime is None:
                    continue
                launch = _launch(m, seen, record.launched if record else {})
                if launch is None:
                    continue
                end = launch + float(settings.max_lifetime)
                if now >= end - float(config.policy.lifetime_lead):
                    out.append(_entry(m, end - now, "max_lifetime"))
    message = f"{len(out)} machines to close and return" + (f" ({'; '.join(notes)})" if notes else "")
    return {"requests": out, "message": printable(message)}
