"""Op values: what one provisioning action asks for, before it is rendered or carried out.

An op is keyed by its op id (``orchestrator.model.instances.new_op_id``); its instances by
``<op_id>-<index>``. The policy (``orchestrator.reconcile.policy``) makes these values; the plan
service renders them, and the fenced executor (``orchestrator.ops``) will carry them out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OpRequest:
    """Create ``count`` hosts of ``template`` on ``provider`` (``asked`` before granularity rounding)."""

    template: str
    provider: str
    count: int
    asked: int
