"""Open ops: an intent at the controller without its outcome.

A create op is open while fewer of its ``count`` instances are accounted for (created, returned
or lost) than it asked for; a return op while one of its ``returning`` instances has no
``returned`` (or ``lost``) fact; a warm-pool start op (an intent naming its keys,
:mod:`orchestrator.model.pool`) while one of them has no ``expectedHost`` of that op and is not
gone. ``xceprov status``, ``xceprov ops`` and resume all read open ops
from here, so they agree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from orchestrator.model.facts import GONE_KINDS, Fact, FactKind
from orchestrator.model.instances import instance_key
from orchestrator.model.pool import start_keys


@dataclass(frozen=True)
class OpenOp:
    """One op with an intent and no (complete) outcome."""

    provider: str
    op_id: str
    kind: str  # "create" | "return" | "start"
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
        starting = start_keys(intent.detail) if intent is not None else None
        if intent is not None and starting is not None:
            expected = {_key(f) for f in op_facts if f.kind == FactKind.EXPECTED_HOST}
            pending = tuple(k for k in starting if k not in expected and k not in gone)
            if pending:
                done = len(starting) - len(pending)
                epoch = intent.epoch.tag()
                out.append(
                    OpenOp(
                        intent.provider,
                        op_id,
                        "start",
                        intent.template,
                        len(starting),
                        done,
                        epoch,
                        intent.committed,
                        pending,
                    )
                )
        elif intent is not None:
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
