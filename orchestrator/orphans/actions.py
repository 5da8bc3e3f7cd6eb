"""Carrying out an orphan finding's action, always through the executor (the fenced path).

* return (class (a)): ``Executor.return_instances`` (``returning`` intent with the lease epoch
  before the desired set shrinks and Terraform destroys; ``returned`` after). An automatic
  return drains as the loop's returns do, without waiting (``NO_WAIT``): a host that joined and
  took work after the scan's read is closed and the return fails at once, before any change in
  the cloud, instead of holding the daemon's loop for its ``drain_timeout``; the reclaim phase
  returns it once its work has ended;
* retire (class (c)): ``Executor.retire``, the host-loss path (``lost`` fact, key out of
  the desired set) under the shard's lock;
* adopt (class (b), matching a live host): an ``orphanAdopted`` fact naming the object and the
  host; nothing in the cloud changes;
* terminate (class (b), opted in): ``Executor.terminate_unmanaged`` (the object is imported
  into the state of shard 0 under a key of its own and destroyed like any return);
* report (class (b)): an ``orphanReported`` fact, once per object (the controller keeps one
  fact per kind, op and key).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Final

from orchestrator.model import tags as owner
from orchestrator.model.facts import Fact, FactKind
from orchestrator.ops.drain import DrainSettings
from orchestrator.ops.executor import OpRecorder, Wired
from orchestrator.orphans.classes import ADOPT, RETIRE, RETURN, TERMINATE, Finding
from orchestrator.reconcile.hostphases import NO_WAIT

# The op id of orphan facts about an object that carries no op id tag of its own.
NO_OP: Final = "orphans"
# An automatic return drains as the loop's returns do: never waiting.
AUTOMATIC_DRAIN: Final = replace(
    NO_WAIT, then="not waited for (automatic returns never wait): returned by the reclaim phase once idle"
)


def _detail(finding: Finding, **more: Any) -> str:
    # launch_time: the listing's, from which the cost ledger counts an adopted orphan (docs/cost.md).
    body = {"class": finding.cls, "evidence": finding.evidence, "tags": finding.tags, **more}
    if finding.launch_time:
        body["launch_time"] = finding.launch_time
    return json.dumps(body, sort_keys=True, default=str)[:4000]


def orphan_fact(recorder: OpRecorder, kind: FactKind, finding: Finding, step: str, **more: Any) -> None:
    """An ``orphanReported`` / ``orphanAdopted`` fact, keyed by the object's cloud id, under the lease."""
    op_id = finding.op_id or NO_OP
    epoch = recorder.gate(finding.provider, op_id, step)
    recorder.commit(
        Fact(
            kind,
            finding.provider,
            op_id,
            epoch,
            instance_key=finding.object_id,
            instance_id=finding.object_id,
            template=finding.tags.get(owner.TEMPLATE, ""),
            host_name=finding.adopt_host or finding.name,
            address=finding.address,
            detail=_detail(finding, **more),
        )
    )


def take(ops: Wired, finding: Finding, confirmed_by: str, *, automatic: bool = False) -> str:
    """Carry out ``finding.action``; the one-line result. Errors reach the caller.

    ``automatic``: the policy's action, taken on the daemon's loop: a return never waits for a
    drain (an administrator's confirmed return drains as ``xceprov return`` does).
    """
    executor = ops.executor
    why = f"orphan class ({finding.cls}), confirmed by {confirmed_by}"
    if finding.action == RETURN:
        drain: DrainSettings | None = AUTOMATIC_DRAIN if automatic else None
        result = executor.return_instances(finding.provider, [finding.instance_key], drain=drain, reason=why)
        return f"returned by op {result.op_id}"
    if finding.action == RETIRE:
        assert finding.lost is not None
        executor.retire(finding.provider, finding.shard, [finding.lost], finding.op_id)
        return "lost fact committed through the host-loss path"
    if finding.action == ADOPT:
        orphan_fact(ops.parts.recorder, FactKind.ORPHAN_ADOPTED, finding, "orphan adopt", confirmed_by=confirmed_by)
        return f"adopted as host {finding.adopt_host}"
    if finding.action == TERMINATE:
        op_id = executor.terminate_unmanaged(finding.provider, finding.object_id, finding.tags, reason=why)
        return f"terminated by op {op_id}"
    raise ValueError(f"no automatic action {finding.action!r}")
