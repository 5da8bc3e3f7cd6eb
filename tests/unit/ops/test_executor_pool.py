"""The warm pool's ops through a fake Terraform engine and an in-memory controller.

What a user would notice: a pool fill creates stopped, tagged instances with no join deadline
and no bootstrap; a start is an op of its own (intent first, an in-place update of exactly its
keys, ``expectedHost`` with a fresh deadline, then the same bootstrap a new host gets); a crash
between the start's apply and its facts is completed by resume without a second apply.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from tffake import ROOT, SITE, CrashOn, FakeEngine, MemoryFacts, unit_executor

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.errors import UnsafePlan
from orchestrator.model import tags as owner
from orchestrator.model.facts import FactKind
from orchestrator.model.firstboot import TOKENS_VARIABLE
from orchestrator.model.pool import FILL_DETAIL, start_keys
from orchestrator.ops.executor import Created
from orchestrator.ops.firstboot import EPHEMERAL_FILE
from orchestrator.ops.openops import open_ops
from orchestrator.protocol.jointoken import check_token, parse_expiry
from orchestrator.workspace.workdir import ProviderWorkdir

JOIN_KEY = "5f" * 32


def entries(loaded: LoadedConfig) -> dict[str, Any]:
    return dict(ProviderWorkdir(loaded.config, "sim", ROOT).desired.read())


def actions(loaded: LoadedConfig) -> list[str]:
    path = loaded.config.state_dir / "audit.log"
    return [json.loads(line)["action"] for line in path.read_text().splitlines()]


class Plays:
    """The bootstrap hook: which hosts it was handed."""

    def __init__(self) -> None:
        self.hosts: list[str] = []

    def __call__(self, provider: str, created: Sequence[Created]) -> dict[str, str]:
        self.hosts.extend(c.key for c in created)
        return {c.name: "ok" for c in created}


def test_a_pool_fill_launches_stopped_tagged_instances_with_no_deadline_and_no_bootstrap(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    facts, plays = MemoryFacts(), Plays()
    result = unit_executor(loaded, engine, facts=facts, bootstrap=plays).create("sim", "cpu", 2, pool=True)
    assert facts.kinds() == ["requestIntent", "instanceCreated", "instanceCreated"]
    assert facts.committed[0].detail == FILL_DETAIL
    assert plays.hosts == [] and result.bootstrap == {}
    assert all(c.pool for c in result.created)
    desired = entries(loaded)
    assert {k: (v.power_state, v.tags[owner.POOL]) for k, v in desired.items()} == {
        c.key: ("stopped", "warm") for c in result.created
    }
    assert open_ops(facts.facts("sim")) == []


def test_a_start_is_an_intent_first_op_that_updates_only_its_keys_then_bootstraps(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    facts, plays = MemoryFacts(), Plays()
    executor = unit_executor(loaded, engine, facts=facts, bootstrap=plays, clock=lambda: 5000.0)
    pool = executor.create("sim", "cpu", 2, pool=True)
    first, second = (c.key for c in pool.created)
    engine.planned_creates.clear()
    started = executor.start_pool("sim", "cpu", [first])
    kinds = facts.kinds()[3:]
    assert kinds == ["requestIntent", "expectedHost"]
    intent, expected = facts.committed[3:]
    assert (intent.op_id, intent.count, start_keys(intent.detail)) == (started.op_id, 0, [first])
    assert (expected.op_id, expected.instance_key, expected.join_deadline) == (started.op_id, first, 5000.0 + 900)
    # Started in place (no create planned), the pool tag gone; the other stays stopped in the pool.
    assert engine.planned_creates == [(ProviderWorkdir(loaded.config, "sim", ROOT).path, [])]
    desired = entries(loaded)
    assert (desired[first].power_state, owner.POOL in desired[first].tags) == ("running", False)
    assert (desired[second].power_state, desired[second].tags[owner.POOL]) == ("stopped", "warm")
    assert plays.hosts == [first] and started.bootstrap == {started.created[0].name: "ok"}
    order = actions(loaded)
    assert order.index("op-start") < order.index("op-desired", order.index("op-start")) < order.index("op-started")
    assert open_ops(facts.facts("sim")) == []


def test_a_start_plan_that_would_do_more_than_start_is_refused(loaded: LoadedConfig, engine: FakeEngine) -> None:
    facts = MemoryFacts()
    executor = unit_executor(loaded, engine, facts=facts)
    pool = executor.create("sim", "cpu", 1, pool=True)
    workdir = ProviderWorkdir(loaded.config, "sim", ROOT)
    FakeEngine.vanish(workdir.path, pool.created[0].key)  # its re-create would be in the plan
    with pytest.raises(UnsafePlan, match="would also create"):
        executor.start_pool("sim", "cpu", [pool.created[0].key])


def test_a_crash_after_the_start_apply_is_completed_by_resume_without_a_second_apply(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    facts, plays = CrashOn(FactKind.EXPECTED_HOST), Plays()
    executor = unit_executor(loaded, engine, facts=facts, bootstrap=plays)
    [made] = executor.create("sim", "cpu", 1, pool=True).created
    with pytest.raises(KeyboardInterrupt):
        executor.start_pool("sim", "cpu", [made.key])
    [op] = open_ops(facts.facts("sim"))
    assert (op.kind, op.pending) == ("start", (made.key,))
    applies = [c for c, _ in engine.calls].count("apply")
    [done] = executor.resume("sim")
    assert (done.kind, done.outcome) == ("start", "completed")
    assert [c for c, _ in engine.calls].count("apply") == applies  # the start had been applied
    assert [f.instance_key for f in facts.committed if f.kind == FactKind.EXPECTED_HOST] == [made.key]
    assert plays.hosts == [made.key]
    assert open_ops(facts.facts("sim")) == []


def test_a_first_boot_start_mints_fresh_tokens_expiring_at_its_expected_hosts_deadline(tmp_path: Path) -> None:
    (tmp_path / "join.key").write_text(JOIN_KEY + "\n")
    text = SITE.format(cluster="unit", state=tmp_path / "state").replace(
        "controller: {ca: system}", f"controller: {{ca: system, join_key: {tmp_path / 'join.key'}}}"
    )
    text = text.replace("cost_per_hour: 0.5}", "cost_per_hour: 0.5}\n    bootstrap: {mode: first-boot}")
    loaded = parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)
    engine, facts, now = FakeEngine(), MemoryFacts(), [5000.0]
    executor = unit_executor(loaded, engine, facts=facts, clock=lambda: now[0])
    [made] = executor.create("sim", "cpu", 1, pool=True).created
    # Launched stopped, the pool instance boots first when a start takes it: no token at the fill.
    assert all(TOKENS_VARIABLE not in v for v in engine.plan_variables)
    now[0] = 9000.2  # long after the fill
    engine.plan_variables.clear()
    started = executor.start_pool("sim", "cpu", [made.key])
    # The start's plan (and its apply) carries a fresh token for the started key only, bound to it.
    assert [sorted(v.get(TOKENS_VARIABLE, {})) for v in engine.plan_variables] == [[made.key]]
    token = engine.plan_variables[0][TOKENS_VARIABLE][made.key]
    assert parse_expiry(token) == 9901
    assert check_token(bytes.fromhex(JOIN_KEY), made.key, made.name, token) == 9901
    # The host is expected until that token's expiry.
    [expected] = [f for f in facts.committed if f.kind == FactKind.EXPECTED_HOST]
    assert (expected.op_id, expected.join_deadline) == (started.op_id, 9901)
    assert not list((loaded.config.state_dir).rglob(EPHEMERAL_FILE))  # gone with the op's scratch
