"""``FactKind`` is the schema's fact kinds, and a fact survives the wire both ways with its kind."""

from __future__ import annotations

import pytest

from orchestrator.clients.controller import messages
from orchestrator.model.facts import GONE_KINDS, Epoch, Fact, FactKind
from orchestrator.protocol.schema import schema


def test_fact_kinds_are_the_schemas_in_its_order() -> None:
    enumerants = schema.FactKind.schema.enumerants
    assert [kind.value for kind in FactKind] == sorted(enumerants, key=enumerants.__getitem__)


def test_a_kind_equals_its_wire_name() -> None:
    # Stores and old callers hold plain strings; they compare equal without conversion.
    assert FactKind.EXPECTED_HOST == "expectedHost"
    assert "lost" in GONE_KINDS and "returning" not in GONE_KINDS


@pytest.mark.parametrize("kind", list(FactKind))
def test_a_fact_round_trips_through_a_capnp_message(kind: FactKind) -> None:
    fact = Fact(kind=kind, provider="sim", op_id="op-6745a1b2-3f9c01", epoch=Epoch(3, 17), count=2)
    wire = schema.Fact.new_message(**messages.fact_dict(fact))
    back = messages.fact(wire.to_dict())
    assert back.kind is kind
    assert (back.provider, back.op_id, back.epoch, back.count) == ("sim", "op-6745a1b2-3f9c01", Epoch(3, 17), 2)
