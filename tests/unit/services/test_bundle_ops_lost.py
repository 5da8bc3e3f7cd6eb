"""A saved plan made after the cloud lost an instance: Terraform would re-create it; that is no op."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import UsageError
from orchestrator.services.apply import BundleOp, bundle_ops


def _spec(op_id: str) -> dict[str, Any]:
    tags = {"xce:op_id": op_id, "xce:template": "cpu"}
    return {"name": f"n-{op_id}", "template": "cpu", "flavor": "c8", "image": "debian-12", "tags": tags}


def _shown(creates: list[str]) -> dict[str, Any]:
    planned = {"op-a-000": _spec("op-a"), "op-a-001": _spec("op-a"), "op-b-000": _spec("op-b")}
    changes = [{"index": k, "change": {"actions": ["create"]}} for k in creates]
    return {"variables": {"instances": {"value": planned}}, "resource_changes": changes}


def test_a_recreate_of_a_desired_key_is_not_read_as_an_op() -> None:
    # op-a-001 was spot-reclaimed: the plan re-creates it next to the new op-b.
    shown = _shown(["op-a-001", "op-b-000"])
    desired = frozenset({"op-a-000", "op-a-001"})
    assert bundle_ops("sim", shown, Path("b"), desired) == [BundleOp("sim", "op-b", "cpu", 1)]


def test_without_the_desired_set_the_recreate_is_still_refused() -> None:
    with pytest.raises(UsageError, match="op op-a plans keys"):
        bundle_ops("sim", _shown(["op-a-001", "op-b-000"]), Path("b"))
