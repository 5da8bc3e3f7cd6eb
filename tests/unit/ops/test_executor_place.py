"""``Executor.place``: an op's intent and desired sets without its apply, completed by any resume."""

from __future__ import annotations

from pathlib import Path

from tffake import FakeEngine, MemoryFacts, site_config, unit_executor

from orchestrator.model.facts import FactKind
from orchestrator.model.instances import instance_key
from orchestrator.ops.openops import open_ops


def test_a_placed_op_asks_nothing_of_the_cloud_and_resume_creates_it_never_abandons_it(tmp_path: Path) -> None:
    loaded = site_config(tmp_path, shard_size=2)
    engine, facts = FakeEngine(), MemoryFacts()
    executor = unit_executor(loaded, engine, facts=facts)
    keys = executor.place("sim", "cpu", 3, "op-6b49d200-0123456789ab", detail='{"contract": {}}')
    assert keys == [instance_key("op-6b49d200-0123456789ab", i) for i in range(3)]
    assert [c for c in engine.calls if c[0] == "apply"] == []
    [intent] = facts.facts("sim")
    assert (intent.kind, intent.count, intent.detail) == (FactKind.REQUEST_INTENT, 3, '{"contract": {}}')
    # The desired sets (two shards of two) hold the op's keys, durably, before any apply.
    held = {k for shard in executor.shards("sim") for k in shard.desired.read()}
    assert held == set(keys)
    [op] = open_ops(facts.facts("sim"))

    [done] = executor.resume("sim")
    assert (done.op_id, done.outcome) == (op.op_id, "completed")
    assert open_ops(facts.facts("sim")) == []
    created = {f.instance_key for f in facts.facts("sim") if f.kind == FactKind.INSTANCE_CREATED}
    assert created == set(keys)
    assert not any(f.kind == FactKind.RETURNED for f in facts.facts("sim"))
