"""Standalone locks, the local fact journal and the plan checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.clients.terraform.messages import PlanResult, ResourceChange, Summary
from orchestrator.errors import LeaseHeld, LeaseLost, UnsafePlan
from orchestrator.model.facts import Fact, FactKind
from orchestrator.ops.facts import LocalFacts
from orchestrator.ops.fence import STANDALONE_EPOCH, ReadOnlyFence, StandaloneFence, epoch_tag
from orchestrator.ops.plancheck import check_create, check_delete

ADDR = 'module.instances.xcesim_instance.this["{}"]'


def plan(*changes: tuple[str, str]) -> PlanResult:
    rcs = tuple(
        ResourceChange(ADDR.format(k), "module.instances", "xcesim_instance", "this", None, a)  # type: ignore[arg-type]
        for k, a in changes
    )
    return PlanResult(changes=rcs, drift=(), diagnostics=(), summary=Summary(), has_changes=bool(rcs))


def test_a_second_standalone_command_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with StandaloneFence(tmp_path, ["sim"]) as first:
        assert first.gate("sim") == STANDALONE_EPOCH and epoch_tag(first.gate("sim")) == "none"
        with pytest.raises(LeaseHeld, match=r"standalone lock .* is held by process \d+; retry"):
            StandaloneFence(tmp_path, ["sim"]).acquire()
    assert not first.valid("sim")
    with pytest.raises(LeaseLost):
        first.gate("sim")
    with StandaloneFence(tmp_path, ["sim"]) as again:  # released: the next command gets it
        assert again.valid("sim")


def test_a_dry_run_fence_never_opens() -> None:
    with pytest.raises(LeaseLost, match="a dry run changes nothing"):
        ReadOnlyFence().gate("sim")


def test_local_facts_are_durable_and_idempotent(tmp_path: Path) -> None:
    log = LocalFacts(tmp_path / "facts" / "unit.jsonl")
    intent = Fact(FactKind.REQUEST_INTENT, "sim", "op-a", STANDALONE_EPOCH, template="cpu", count=1)
    log.commit(intent)
    log.commit(intent)  # a resumed op commits again: no duplicate
    log.commit(Fact(FactKind.INSTANCE_CREATED, "sim", "op-a", STANDALONE_EPOCH, instance_key="op-a-000"))
    again = LocalFacts(tmp_path / "facts" / "unit.jsonl").facts("sim")
    assert [(f.kind, f.fact_id) for f in again] == [("requestIntent", 1), ("instanceCreated", 2)]
    assert again[0].epoch == STANDALONE_EPOCH and again[0].count == 1
    with (tmp_path / "facts" / "unit.jsonl").open("a") as f:
        f.write('{"kind": "retur')  # torn by a crash mid-write: ignored
    assert len(LocalFacts(tmp_path / "facts" / "unit.jsonl").facts("sim")) == 2


def test_a_create_may_create_exactly_its_keys() -> None:
    check_create(plan(("op-a-000", "create"), ("op-a-001", "create"), ("x", "read")), {"op-a-000", "op-a-001"}, "op a")
    for bad, what in (
        (("op-b-000", "create"), "create op-b-000"),
        (("op-z-000", "delete"), "delete op-z-000"),
        (("op-a-000", "replace"), "replace op-a-000"),
        (("op-z-000", "update"), "update op-z-000"),
    ):
        with pytest.raises(UnsafePlan, match=f"op a: the plan would also {what}"):
            check_create(plan(("op-a-001", "create"), bad), {"op-a-000", "op-a-001"}, "op a")


def test_a_return_may_delete_exactly_the_chosen_keys() -> None:
    assert check_delete(plan(("k1", "delete")), {"k1", "k2"}, "return") == ["k1"]
    with pytest.raises(UnsafePlan, match="delete k3"):
        check_delete(plan(("k1", "delete"), ("k3", "delete")), {"k1"}, "return")
    with pytest.raises(UnsafePlan, match="create k1"):
        check_delete(plan(("k1", "create")), {"k1"}, "return")
