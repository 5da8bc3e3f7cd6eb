"""Op values: what one provisioning action asks for, before it is rendered or carried out.

An op is keyed by its op id (``orchestrator.model.instances.new_op_id``); its instances by
``<op_id>-<index>``. The policy (``orchestrator.reconcile.policy``) makes these values; the plan
service renders them, and the fenced executor (``orchestrator.ops``) will carry them out.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.model.offerings import Placement


@dataclass(frozen=True)
class OpRequest:
    """Create ``count`` hosts of ``template`` on ``provider`` (``asked`` before granularity rounding).

    ``placements``: the offerings its keys go to, in key order (their counts sum to ``count``);
    empty: every key on the provider's default offering (a warm-pool fill, an op of old).
    """

    template: str
    provider: str
    count: int
    asked: int
    placements: tuple[Placement, ...] = ()
