"""The executor reports its long work: plans made, instances created and destroyed, per op and shard."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from tffake import ADDR, FakeEngine, site_config, unit_executor

from orchestrator.clients.terraform.messages import (
    ApplyHook,
    ApplyResult,
    Diagnostic,
    PlanResult,
    ResourceChange,
    Summary,
)
from orchestrator.configfile import LoadedConfig
from orchestrator.model.progress import InstanceDone, ProgressBoard, ProgressEvent
from orchestrator.ops.progress import ApplyTracker


def test_a_create_over_shards_then_a_return_report_every_instance(tmp_path: Path, engine: FakeEngine) -> None:
    loaded = site_config(tmp_path, shard_size=3, parallel_states=2)
    board = ProgressBoard()
    executor = unit_executor(loaded, engine, progress=board)
    made = executor.create("sim", "cpu", 7)
    scope = f"sim {made.op_id}"
    counts = {c.phase: c for c in board.snapshot() if c.scope == scope}
    assert counts["plan"].describe() == f"plan {scope}: 3/3 planned (+7 ~0 -0)"  # one plan per shard
    assert counts["apply"].describe() == f"apply {scope}: 7/7 created"
    assert not counts["apply"].running and counts["apply"].starts == 3
    assert {u.name for u in board.outcomes()} == {c.name for c in made.created}

    gone = executor.return_instances("sim", [c.key for c in made.created[:4]])
    back = {c.phase: c for c in board.snapshot() if c.scope == f"sim {gone.op_id}"}
    assert back["apply"].describe() == f"apply sim {gone.op_id}: 4/4 destroyed"
    assert sorted(u.name for u in board.outcomes() if u.outcome == "destroyed") == sorted(
        c.name for c in made.created[:4]
    )


def test_without_a_sink_an_engine_without_the_hook_still_works(loaded: LoadedConfig) -> None:
    class OldEngine(FakeEngine):
        """An engine written before the progress hook: its apply takes no ``on_event``."""

        def apply(  # type: ignore[override]
            self,
            workdir: Path,
            plan_file: Path | None = None,
            var_files: Sequence[Path] = (),
            auto_approve: bool = True,
            should_stop: Callable[[], bool] | None = None,
        ) -> ApplyResult:
            return super().apply(workdir, plan_file, var_files, auto_approve, should_stop)

    made = unit_executor(loaded, OldEngine()).create("sim", "cpu", 2)
    assert len(made.created) == 2


def _change(key: str, kind: str = "xcesim_instance") -> ResourceChange:
    return ResourceChange(
        ADDR.format(key=key).replace("xcesim_instance", kind), "module.instances", kind, "this", key, "create"
    )


def test_an_instance_is_done_when_all_its_resources_are_and_a_failure_names_terraforms_reason() -> None:
    plan = PlanResult(
        changes=(_change("op1-000"), _change("op1-000", "xcesim_volume"), _change("op1-001"), _change("op1-002")),
        drift=(),
        diagnostics=(),
        summary=Summary(add=4),
        has_changes=True,
    )
    seen: list[ProgressEvent] = []
    tracker = ApplyTracker(seen.append, "sim op1", plan, {"op1-000": "h0", "op1-001": "h1"})
    assert tracker.total == 3
    tracker(ApplyHook("start", _change("op1-000")))
    tracker(ApplyHook("complete", _change("op1-000")))
    assert seen == []  # its volume is not done yet
    tracker(ApplyHook("complete", _change("op1-000", "xcesim_volume")))
    tracker(ApplyHook("errored", _change("op1-001")))
    tracker(ApplyHook("errored", _change("op1-002")))
    tracker(
        Diagnostic(
            "error", "creating instance", "capacity exhausted for c8.large\nmore", address=_change("op1-001").addr
        )
    )
    tracker(ApplyHook("complete", _change("other")))  # not in the plan: not counted
    tracker.finish()
    assert seen == [
        InstanceDone("sim op1", "op1-000", "h0", "create"),
        InstanceDone("sim op1", "op1-001", "h1", "create", False, "creating instance: capacity exhausted for c8.large"),
        InstanceDone("sim op1", "op1-002", "", "create", False, "the apply failed (see the error)"),
    ]
