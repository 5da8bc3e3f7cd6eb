"""What the facts say about the machines of a cluster, as the contract reads them.

The facts are the record of every op (create intents, created instances, returns, losses): the
contract counts the room left on a provider from them, finds a request's op and its machines,
and names machines by host name or cloud id.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.model.facts import GONE_KINDS, Fact, FactKind
from orchestrator.model.instances import instance_key
from orchestrator.reconcile.ledger import ledger

CONTRACT_DETAIL = "contract"


@dataclass(frozen=True)
class Machine:
    """One instance the facts know: created (with its cloud id, name, address) and maybe gone."""

    provider: str
    key: str
    op_id: str
    template: str
    instance_id: str
    name: str
    address: str
    created: float
    gone: str = ""  # "" | "returned" | "lost"
    returning_op: str = ""  # the return op that took it back (or is taking it)
    lost_reason: str = ""  # why it was lost, as the host-loss path recorded it (spot-reclaim, missing...)
    # The offering it was placed on (its intent's placements; else its template's default on the
    # provider, ``defaults``; "" when neither says).
    offering: str = ""


def _detail(detail: str) -> dict[str, Any]:
    """A fact's ``detail`` as a JSON object (empty when it is none)."""
    if not detail.startswith("{"):
        return {}
    try:
        value = json.loads(detail)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def contract_detail(detail: str) -> dict[str, Any]:
    """The contract's part of a fact's ``detail`` (empty when the fact is not the contract's)."""
    part = _detail(detail).get(CONTRACT_DETAIL)
    return part if isinstance(part, dict) else {}


def machines(facts: Iterable[Fact], defaults: Mapping[tuple[str, str], str] | None = None) -> dict[str, Machine]:
    """Every created instance of the facts, by instance key; ``defaults``: (provider, template) →
    its default offering's name (:func:`~orchestrator.reconcile.offers.default_names`), the
    offering of a key whose intent names none (the ledger's ``offering``)."""
    ordered = sorted(facts, key=lambda f: f.fact_id)
    out: dict[str, Machine] = {}
    placed = {key: record.offering for key, record in ledger(ordered, defaults or {}).items()}
    for fact in ordered:
        if fact.kind == FactKind.INSTANCE_CREATED:
            out[fact.instance_key] = Machine(
                fact.provider,
                fact.instance_key,
                fact.op_id,
                fact.template,
                fact.instance_id,
                fact.host_name,
                fact.address,
                fact.committed,
                offering=placed.get(fact.instance_key, ""),
            )
    for fact in ordered:
        known = out.get(fact.instance_key)
        if known is None:
            continue
        if fact.kind == FactKind.RETURNING:
            out[fact.instance_key] = replace(known, returning_op=fact.op_id)
        elif fact.kind in GONE_KINDS:
            why = _reason(fact.detail) if fact.kind == FactKind.LOST else ""
            out[fact.instance_key] = replace(known, gone=str(fact.kind), lost_reason=why)
    return out


def _reason(detail: str) -> str:
    """The ``reason`` of a ``lost`` fact's detail (the host-loss path's evidence), or ""."""
    reason = _detail(detail).get("reason")
    return reason if isinstance(reason, str) else ""


def live_keys(facts: Sequence[Fact], template: str | None = None) -> set[str]:
    """Keys of the provider's instances that exist or are being created (of ``template`` when given):
    every create intent's keys not yet gone."""
    gone = {f.instance_key for f in facts if f.kind in GONE_KINDS}
    out: set[str] = set()
    for fact in facts:
        if fact.kind == FactKind.REQUEST_INTENT and (template is None or fact.template == template):
            out.update(k for i in range(fact.count) if (k := instance_key(fact.op_id, i)) not in gone)
    return out


def op_facts(facts: Iterable[Fact], op_id: str) -> list[Fact]:
    """The facts of one op, oldest first."""
    return sorted((f for f in facts if f.op_id == op_id), key=lambda f: f.fact_id)
