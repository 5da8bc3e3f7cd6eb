"""Open ops: an intent at the controller without its outcome.

A create op is open while fewer of its ``count`` instances are accounted for (created, returned
or lost) than it asked for; a return op while one of its ``returning`` instances has no
``returned`` (or ``lost``) fact. ``xceprov status``, ``xceprov ops`` and resume all read open ops
from here, so they agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from orchestrator.model.facts import GONE_KINDS, Fact, FactKind
from orchestrator.model.instances import instance_key


@dataclass(frozen=True)
class OpenOp:
    """One op with an intent and no (complete) outcome."""

    provider: str
    op_id: str
    kind: str  # "create" | "return"
    template: str
    count: int
    done: int
    epoch: str
    since: float
    # The instance keys still without an outcome.
    pending: tuple[str, ...] = field(default=())
    # The intent's detail (a bake's builder: ``bake: ...``, docs/images.md); "" for a return.
    detail: str = ""


def _key(fact: Fact) -> str:
    return fact.instance_key or fact.instance_id


def open_ops(facts: Iterable[Fact]) -> list[OpenOp]:
    """Ops of one provider that have an intent without its outcome, oldest first."""
    ordered = sorted(facts, key=lambda f: f.fact_id)
    gone = {_key(f) for f in ordered if f.kind in GONE_KINDS}
    created = {_key(f) for f in ordered if f.kind == FactKind.INSTANCE_CREATED}
    by_op: dict[str, list[Fact]] = {}
    for fact in ordered:
        by_op.setdefault(fact.op_id, []).append(fact)
    out: list[OpenOp] = []
    for op_id, op_facts in by_op.items():
        intent = next((f for f in op_facts if f.kind == FactKind.REQUEST_INTENT), None)
        if intent is not None:
            # An instance is accounted for once it was created or has an outcome (lost before its
            # creation was recorded). A lost instance does not close the op: the others may still
            # be missing, and crash recovery must see the op to complete it.
            keys = [instance_key(op_id, i) for i in range(intent.count)]
            pending = tuple(k for k in keys if k not in created and k not in gone)
            if pending:
                out.append(
                    OpenOp(
                        intent.provider,
                        op_id,
                        "create",
                        intent.template,
                        intent.count,
                        intent.count - len(pending),
                        intent.epoch.tag(),
                        intent.committed,
                        pending,
                        intent.detail,
                    )
                )
        returning = [f for f in op_facts if f.kind == FactKind.RETURNING]
        waiting = tuple(_key(f) for f in returning if _key(f) not in gone)
        if waiting:
            first = returning[0]
            out.append(
                OpenOp(
                    first.provider,
                    op_id,
                    "return",
                    first.template,
                    len(returning),
                    len(returning) - len(waiting),
                    first.epoch.tag(),
                    first.committed,
                    waiting,
                )
            )
    return out
