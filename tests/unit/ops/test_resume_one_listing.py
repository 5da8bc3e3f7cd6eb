"""One tagged listing per resume: the survey's, under the lease it was read under.

A takeover resumes the previous holder's create whose apply never ran: the survey lists the
cloud, and the resumed create uses that listing (and the states the survey read) instead of a
second refresh-only plan, but only while the fence stamps the epoch the survey read under.
"""

from __future__ import annotations

import json

import pytest
from tffake import FakeEngine, FakeFence, MemoryFacts, unit_executor

from orchestrator.configfile import LoadedConfig
from orchestrator.errors import LeaseLost
from orchestrator.model import tags as owner
from orchestrator.model.facts import Epoch
from orchestrator.ops.executor import Executor
from orchestrator.ops.openops import OpenOp, open_ops


def interrupted(loaded: LoadedConfig, engine: FakeEngine) -> tuple[Executor, FakeFence, MemoryFacts, OpenOp]:
    """A create whose desired set was written but whose apply the lost lease stopped."""
    fence, facts = FakeFence(), MemoryFacts()
    executor = unit_executor(loaded, engine, fence=fence, facts=facts)
    engine.during_apply = lambda _workdir: setattr(fence, "revoked", True)  # lost as the apply starts
    with pytest.raises(LeaseLost):
        executor.create("sim", "cpu", 2)
    engine.during_apply, fence.revoked = None, False
    fence.epoch = Epoch(3, 8)  # the lease granted again (a takeover): a new epoch
    [op] = open_ops(facts.facts("sim"))
    engine.listed = {"i-of-another-op": ("running", "")}  # the module lists by tag
    engine.calls.clear()
    return executor, fence, facts, op


def listings(engine: FakeEngine) -> int:
    """Terraform plans: a refresh-only one per tagged listing, one per apply."""
    return [c for c, _ in engine.calls].count("plan")


def recreate(loaded: LoadedConfig) -> dict[str, object]:
    lines = (loaded.config.state_dir / "audit.log").read_text().splitlines()
    return next(json.loads(x) for x in reversed(lines) if json.loads(x)["action"] == "resume-recreate")


def test_the_resumed_create_uses_the_survey_s_listing_under_the_same_lease(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    executor, _fence, facts, op = interrupted(loaded, engine)
    found = executor.survey("sim")
    assert found.listing == "read" and found.seen is not None and found.seen.epoch == "3.8"
    after_survey = listings(engine)
    done = executor.resume_op(op, found.seen)
    assert done.outcome == "completed" and open_ops(facts.facts("sim")) == []
    # The resume planned the apply only: no second listing of the cloud.
    assert listings(engine) - after_survey == 1
    assert recreate(loaded)["listing"] == "read"


def test_a_listing_read_under_another_lease_is_not_used(loaded: LoadedConfig, engine: FakeEngine) -> None:
    executor, fence, facts, op = interrupted(loaded, engine)
    found = executor.survey("sim")
    after_survey = listings(engine)
    fence.epoch = Epoch(3, 9)  # lost and granted again between the survey and the resume
    done = executor.resume_op(op, found.seen)
    assert done.outcome == "completed" and open_ops(facts.facts("sim")) == []
    assert listings(engine) - after_survey == 2  # listed again under 3.9, then the apply's plan


def test_a_survey_without_a_lease_keeps_nothing_for_a_resume(loaded: LoadedConfig, engine: FakeEngine) -> None:
    executor, fence, _facts, _op = interrupted(loaded, engine)
    fence.revoked = True  # a read beside the holder (xceprov ops): no lease
    found = executor.survey("sim")
    assert found.listing == "read" and found.seen is None


def test_another_provider_s_instances_are_neither_untracked_nor_evidence_here(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    executor, _fence, _facts, op = interrupted(loaded, engine)
    # The module lists the cluster: this provider's stray, another provider's instances (one
    # even under this op's id), and an object with no provider tag (nobody's).
    engine.listed = {i: ("running", "") for i in ("i-stray", "i-spot", "i-spot-same-op", "i-bare")}
    engine.listed_tags = {
        "i-stray": {owner.CLUSTER: "unit", owner.PROVIDER: "sim", owner.OP_ID: "op-by-hand"},
        "i-spot": {owner.CLUSTER: "unit", owner.PROVIDER: "spot", owner.OP_ID: "op-of-spot"},
        "i-spot-same-op": {owner.CLUSTER: "unit", owner.PROVIDER: "spot", owner.OP_ID: op.op_id},
    }
    found = executor.survey("sim")  # the daemon's resume phase audits found.untracked
    assert found.untracked == ["i-bare (cloud, op ?)", "i-stray (cloud, op op-by-hand)"]
    executor.resume_op(op, found.seen)
    assert recreate(loaded)["tagged"] == []
