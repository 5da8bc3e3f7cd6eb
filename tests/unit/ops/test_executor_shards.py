"""Ops over a provider's shards (docs/architecture.md, "Bursts that scale"), through the fake engine.

What a user would notice: an op larger than ``shard_size`` lands in several states of bounded
size, each plan creating only its own keys; new ops fill the least-full shard; a return touching
two shards deletes from both; a shard that failed leaves the op open and resume re-applies only
that shard; no more than ``terraform.parallel_states`` states are applied at a time.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from tffake import ROOT, FakeEngine, MemoryFacts, site_config, unit_executor

from orchestrator.configfile import LoadedConfig
from orchestrator.errors import TerraformError
from orchestrator.model.facts import FactKind
from orchestrator.ops.openops import open_ops
from orchestrator.workspace.shards import ProviderShards


def small_shards(tmp_path: Path, parallel_states: int | None = None) -> LoadedConfig:
    return site_config(tmp_path, shard_size=3, parallel_states=parallel_states)


def shard_paths(loaded: LoadedConfig) -> list[Path]:
    return [s.path for s in ProviderShards(loaded.config, "sim", ROOT).all()]


def held_by_shard(loaded: LoadedConfig) -> list[list[str]]:
    """The instance keys of each shard's (fake) Terraform state, shard 0 first."""
    return [sorted(FakeEngine.state(path)["instances"]) for path in shard_paths(loaded)]


def settings_of(path: Path) -> dict[str, Any]:
    return dict(json.loads((path / "desired.tfvars.json").read_text())["settings"])


def applies(engine: FakeEngine) -> list[Path]:
    return [path for call, path in engine.calls if call == "apply"]


def agree(facts: MemoryFacts, loaded: LoadedConfig) -> None:
    """Every held instance (in any shard) was created once, nothing else is recorded, nothing open."""
    created = [f.instance_key for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED]
    gone = {f.instance_key for f in facts.committed if f.kind in (FactKind.RETURNED, FactKind.LOST)}
    assert len(created) == len(set(created))
    assert set(created) - gone == {k for keys in held_by_shard(loaded) for k in keys}
    assert open_ops(facts.facts("sim")) == []


def test_an_op_larger_than_a_shard_spans_shards_and_each_plan_creates_only_its_keys(
    tmp_path: Path, engine: FakeEngine
) -> None:
    loaded, facts = small_shards(tmp_path), MemoryFacts()
    result = unit_executor(loaded, engine, facts=facts).create("sim", "cpu", 7)
    keys = sorted(c.key for c in result.created)
    assert len(keys) == 7
    per_shard = held_by_shard(loaded)
    assert [len(k) for k in per_shard] == [3, 3, 1]
    assert sorted(k for part in per_shard for k in part) == keys
    # Every plan that led to an apply created exactly the keys its shard now holds.
    creating = {path: created for path, created in engine.planned_creates if created}
    assert creating == {path: held for path, held in zip(shard_paths(loaded), per_shard, strict=True)}
    # Only shard 0 reads the tagged listing.
    paths = shard_paths(loaded)
    assert "list_tagged" not in settings_of(paths[0])
    assert [settings_of(p)["list_tagged"] for p in paths[1:]] == [False, False]
    agree(facts, loaded)


def test_two_ops_fill_the_least_full_shard(tmp_path: Path, engine: FakeEngine) -> None:
    loaded, facts = small_shards(tmp_path), MemoryFacts()
    executor = unit_executor(loaded, engine, facts=facts)
    first = executor.create("sim", "cpu", 5)  # 3 in shard 0, 2 in shard 1
    shard0 = held_by_shard(loaded)[0]
    executor.return_instances("sim", shard0[:2])  # shard 0 keeps 1: now the least full
    second = executor.create("sim", "gpu", 2)
    per_shard = held_by_shard(loaded)
    assert sorted(c.key for c in second.created) == sorted(set(per_shard[0]) - set(shard0))
    assert [len(k) for k in per_shard] == [3, 2]
    assert set(per_shard[1]) <= {c.key for c in first.created}
    agree(facts, loaded)


def test_a_return_of_keys_in_two_shards_applies_both(tmp_path: Path, engine: FakeEngine) -> None:
    loaded, facts = small_shards(tmp_path), MemoryFacts()
    executor = unit_executor(loaded, engine, facts=facts)
    executor.create("sim", "cpu", 5)
    before = held_by_shard(loaded)
    chosen = [before[0][0], before[1][0]]
    applied_before = len(applies(engine))
    result = executor.return_instances("sim", chosen)
    assert sorted(result.deleted) == sorted(chosen) and len(result.plans) == 2
    assert sorted(applies(engine)[applied_before:]) == sorted(shard_paths(loaded)[:2])
    assert held_by_shard(loaded) == [before[0][1:], before[1][1:]]
    assert sorted(f.instance_key for f in facts.committed if f.kind == FactKind.RETURNED) == sorted(chosen)
    agree(facts, loaded)


def test_resume_after_one_shard_failed_reapplies_only_that_shard(tmp_path: Path, engine: FakeEngine) -> None:
    loaded, facts = small_shards(tmp_path), MemoryFacts()
    executor = unit_executor(loaded, engine, facts=facts)
    broken = ProviderShards(loaded.config, "sim", ROOT).shard(2).path
    engine.fail_apply.add(broken)
    with pytest.raises(TerraformError, match="injected"):
        executor.create("sim", "cpu", 7)
    # The other shards applied and got their facts; the op stays open for the failed one.
    assert [len(k) for k in held_by_shard(loaded)] == [3, 3, 0]
    assert len([f for f in facts.committed if f.kind == FactKind.INSTANCE_CREATED]) == 6
    [still_open] = open_ops(facts.facts("sim"))
    assert (still_open.done, still_open.count, len(still_open.pending)) == (6, 7, 1)
    applied_before = len(applies(engine))
    [done] = executor.resume("sim")
    assert done.outcome == "completed"
    assert applies(engine)[applied_before:] == [broken]
    assert [len(k) for k in held_by_shard(loaded)] == [3, 3, 1]
    agree(facts, loaded)


def test_no_more_than_parallel_states_shards_apply_at_once(tmp_path: Path, engine: FakeEngine) -> None:
    loaded, facts = small_shards(tmp_path, parallel_states=2), MemoryFacts()
    # The first two applies wait for each other: they can only both pass if they run side by
    # side (the timeout only turns a hang into a failure).
    together = threading.Barrier(2, timeout=30)
    seen: list[Path] = []

    def meet(workdir: Path) -> None:
        seen.append(workdir)
        if len(seen) <= 2:
            together.wait()

    engine.during_apply = meet
    unit_executor(loaded, engine, facts=facts).create("sim", "cpu", 12)
    assert [len(k) for k in held_by_shard(loaded)] == [3, 3, 3, 3]
    assert len(seen) == 4 and engine.peak_in_flight == 2
    agree(facts, loaded)
