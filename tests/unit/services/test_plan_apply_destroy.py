"""The decisions of ``plan``, ``apply`` and ``destroy``, through a fake Terraform engine.

What a user would notice: what a plan saves (and that a preview saves nothing), that a saved
plan applies or is refused with exit code 7 leaving the desired set as it was, and that destroy
touches only the instances it was asked for, within ``--max``, and nothing with ``--dry-run``.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from tffake import ROOT, FakeEngine, MemoryFacts, site_config, unit_ops

from orchestrator.configfile import LoadedConfig
from orchestrator.errors import FinalError, StaleState, TerraformError, UnsafePlan, UsageError
from orchestrator.model import tags as owner
from orchestrator.services.apply import apply_bundle
from orchestrator.services.destroy import destroy
from orchestrator.services.plan import plan_burst
from orchestrator.workspace.workdir import ProviderWorkdir


def workdir(loaded: LoadedConfig) -> ProviderWorkdir:
    return ProviderWorkdir(loaded.config, "sim", ROOT)


def audit_actions(loaded: LoadedConfig) -> list[str]:
    path = loaded.config.state_dir / "audit.log"
    return [json.loads(line)["action"] for line in path.read_text().splitlines()] if path.exists() else []


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def applied(loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path, name: str, **wanted: int) -> Path:
    bundle = tmp_path / name
    plan_burst(loaded, wanted, out=bundle, toolkit_root=ROOT, engine=engine)
    apply_bundle(loaded, bundle, ROOT, wired=unit_ops(loaded, engine))
    return bundle


# --- plan -------------------------------------------------------------------------------


def test_preview_reports_instances_tags_and_cost_and_records_nothing(loaded: LoadedConfig, engine: FakeEngine) -> None:
    plan = plan_burst(loaded, {"cpu": 2, "gpu": 1}, toolkit_root=ROOT, engine=engine)
    [sim] = plan.providers
    assert (sim.add, sim.change, sim.destroy) == (3, 0, 0)
    assert plan.cost_per_hour == pytest.approx(4.0)
    assert sim.cost_by_template == {"cpu": 1.0, "gpu": 3.0}
    assert sorted(i.template for i in sim.instances) == ["cpu", "cpu", "gpu"]
    for inst in sim.instances:
        assert inst.tags[owner.CLUSTER] == "unit" and inst.tags[owner.TEMPLATE] == inst.template
        assert inst.key.startswith(inst.tags[owner.OP_ID])
    assert not workdir(loaded).desired_file.exists()
    assert [c for c, _ in engine.calls if c == "apply"] == []
    assert plan.out is None and sim.plan_file is None


def test_bundle_holds_the_plan_of_exactly_the_previewed_instances_privately(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    old = os.umask(0o022)  # a usual umask: the bundle must be private anyway
    try:
        plan = plan_burst(loaded, {"cpu": 2}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)
    finally:
        os.umask(old)
    bundle = tmp_path / "b"
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert (manifest["format"], manifest["cluster"], manifest["config"]) == (1, "unit", loaded.source)
    assert manifest["providers"] == [{"name": "sim", "plan_file": "sim.tfplan", "lost": []}]
    saved = json.loads((bundle / "sim.tfplan").read_text())
    planned_keys = sorted(i.key for i in plan.providers[0].instances)
    assert sorted(saved["variables"]["instances"]) == planned_keys
    # The simulated cloud's store is defaulted: the site did not have to spell it out.
    store = loaded.config.sim_state_dir() / "cloud.sqlite"
    assert saved["variables"]["settings"] == {"store": str(store)}
    assert saved["variables"]["common_tags"] == {owner.CLUSTER: "unit", owner.PROVIDER: "sim"}
    assert mode(bundle) == 0o700
    assert {p.name: mode(p) for p in bundle.iterdir()} == {"manifest.json": 0o600, "sim.tfplan": 0o600}
    assert mode(loaded.config.state_dir) == 0o700
    assert not workdir(loaded).desired_file.exists()


def test_plan_refuses_a_directory_that_is_not_empty_and_keeps_it(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="exists and is not an empty directory"):
        plan_burst(loaded, {"cpu": 1}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)
    assert [p.name for p in (tmp_path / "b").iterdir()] == ["notes.txt"]


def test_a_failed_plan_leaves_no_bundle_behind(loaded: LoadedConfig, tmp_path: Path) -> None:
    class FailingPlan(FakeEngine):
        def plan(self, *args: object, **kwargs: object) -> object:  # type: ignore[override]
            raise TerraformError("main.tf:3: Error: boom")

    with pytest.raises(TerraformError):
        plan_burst(loaded, {"cpu": 1}, out=tmp_path / "b", toolkit_root=ROOT, engine=FailingPlan())
    assert not (tmp_path / "b").exists()
    # Nothing half-made can be applied either.
    with pytest.raises(UsageError, match="not a plan bundle"):
        apply_bundle(loaded, tmp_path / "b", ROOT, engine=FakeEngine())


# --- apply ------------------------------------------------------------------------------


def test_apply_records_the_desired_set_then_applies_and_audits(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    plan_burst(loaded, {"cpu": 2}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)
    facts = MemoryFacts()
    [result] = apply_bundle(loaded, tmp_path / "b", ROOT, wired=unit_ops(loaded, engine, facts=facts))
    desired = workdir(loaded).desired.read()
    assert sorted(result.instances) == sorted(desired) and len(desired) == 2
    assert sorted(FakeEngine.state(workdir(loaded).path)["instances"]) == sorted(desired)
    actions = audit_actions(loaded)
    assert actions[0] == "apply" and actions[-1] == "applied"
    # The instance facts of the shard are one batch: one audit entry for both instances.
    steps = ["fact-requestIntent", "op-desired", "op-apply", "fact-instanceCreated+expectedHost", "op-created"]
    assert [a for a in actions if a in steps] == steps
    # The cloud gets the lease's epoch, not the plan's "none"; the controller gets one intent.
    assert {i["tags"][owner.EPOCH] for i in result.instances.values()} == {"3.7"}
    assert facts.kinds() == ["requestIntent"] + ["instanceCreated", "expectedHost"] * 2
    assert mode(workdir(loaded).desired_file) == 0o600
    assert mode(loaded.config.state_dir / "audit.log") == 0o600


def test_a_stale_plan_is_refused_with_exit_7_and_the_desired_set_restored(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    plan_burst(loaded, {"cpu": 2}, out=tmp_path / "first", toolkit_root=ROOT, engine=engine)
    plan_burst(loaded, {"gpu": 1}, out=tmp_path / "second", toolkit_root=ROOT, engine=engine)
    apply_bundle(loaded, tmp_path / "first", ROOT, wired=unit_ops(loaded, engine))
    wd = workdir(loaded)
    before = wd.desired_file.read_bytes()
    facts = MemoryFacts()
    with pytest.raises(StaleState) as refused:
        apply_bundle(loaded, tmp_path / "second", ROOT, wired=unit_ops(loaded, engine, facts=facts))
    assert refused.value.exit_code == 7
    assert wd.desired_file.read_bytes() == before
    assert [i.template for i in wd.desired.read().values()] == ["cpu", "cpu"]
    assert audit_actions(loaded)[-2:] == ["apply", "apply-refused"]
    assert facts.committed == []  # refused before any intent
    assert sorted(p.name for p in wd.path.iterdir() if p.name.startswith(".desired")) == []


def test_a_missing_desired_set_beside_a_state_is_refused_not_read_as_delete_all(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    applied(loaded, engine, tmp_path, "a", cpu=2)
    wd = workdir(loaded)
    wd.desired_file.unlink()  # lost: the state still holds two instances
    plan_burst(loaded, {"cpu": 1}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)
    facts = MemoryFacts()
    with pytest.raises(FinalError, match="missing, but the Terraform state of provider sim holds 2 instances"):
        apply_bundle(loaded, tmp_path / "b", ROOT, wired=unit_ops(loaded, engine, facts=facts))
    with pytest.raises(FinalError, match="refusing to read that as 'delete everything'"):
        destroy(loaded, ROOT, all_instances=True, wired=unit_ops(loaded, engine, facts=facts))
    assert not wd.desired_file.exists() and facts.committed == []
    assert len(FakeEngine.state(wd.path)["instances"]) == 2


def test_a_plan_that_would_delete_what_the_op_did_not_ask_is_refused(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    applied(loaded, engine, tmp_path, "a", cpu=1)
    wd = workdir(loaded)
    state = FakeEngine.state(wd.path)
    state["instances"]["op-00000001-abcdef-000"] = {"id": "i-x", "name": "x", "address": "", "tags": {}}
    (wd.path / "fake.tfstate.json").write_text(json.dumps(state))  # the state moved under the desired set
    before = wd.desired_file.read_bytes()
    plan_burst(loaded, {"cpu": 1}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)
    with pytest.raises(UnsafePlan, match="would also delete op-00000001-abcdef-000") as refused:
        apply_bundle(loaded, tmp_path / "b", ROOT, wired=unit_ops(loaded, engine))
    assert refused.value.exit_code == 8
    assert wd.desired_file.read_bytes() == before
    assert "op-00000001-abcdef-000" in FakeEngine.state(wd.path)["instances"]


def test_apply_refuses_a_bundle_of_another_cluster_before_touching_anything(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    other = site_config(tmp_path / "other", cluster="other")
    plan_burst(other, {"cpu": 1}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)
    calls = len(engine.calls)
    with pytest.raises(UsageError, match="planned for cluster 'other', configuration is 'unit'"):
        apply_bundle(loaded, tmp_path / "b", ROOT, wired=unit_ops(loaded, engine))
    assert len(engine.calls) == calls


# --- destroy ----------------------------------------------------------------------------


def ops_by_template(loaded: LoadedConfig) -> dict[str, str]:
    return {spec.template: spec.tags[owner.OP_ID] for spec in workdir(loaded).desired.read().values()}


def test_destroy_by_op_removes_only_that_ops_instances(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    applied(loaded, engine, tmp_path, "b", cpu=2, gpu=1)
    gpu_op = ops_by_template(loaded)["gpu"]
    result = destroy(loaded, ROOT, ops=[gpu_op], wired=unit_ops(loaded, engine))
    [gone] = result.removed["sim"]
    assert gone.startswith(gpu_op)
    remaining = workdir(loaded).desired.read()
    assert sorted(s.template for s in remaining.values()) == ["cpu", "cpu"]
    assert sorted(FakeEngine.state(workdir(loaded).path)["instances"]) == sorted(remaining)
    assert audit_actions(loaded)[-1] == "op-returned"
    assert "op-return" in audit_actions(loaded)


def test_destroy_all_never_reaches_another_clusters_instances(engine: FakeEngine, tmp_path: Path) -> None:
    ours, theirs = site_config(tmp_path, "unit"), site_config(tmp_path, "other")  # one state_dir
    applied(ours, engine, tmp_path, "ours", cpu=1)
    applied(theirs, engine, tmp_path, "theirs", cpu=2)
    result = destroy(ours, ROOT, all_instances=True, wired=unit_ops(ours, engine))
    assert len(result.removed["sim"]) == 1
    assert workdir(ours).desired.read() == {}
    assert len(workdir(theirs).desired.read()) == 2
    assert len(FakeEngine.state(workdir(theirs).path)["instances"]) == 2


def test_destroy_dry_run_changes_nothing(loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path) -> None:
    applied(loaded, engine, tmp_path, "b", cpu=3)
    before = workdir(loaded).desired_file.read_bytes()
    calls = len(engine.calls)
    result = destroy(loaded, ROOT, all_instances=True, dry_run=True, max_destroy=1, wired=unit_ops(loaded, engine))
    assert result.dry_run and len(result.removed["sim"]) == 3
    assert workdir(loaded).desired_file.read_bytes() == before
    assert "plan" in [c for c, _ in engine.calls[calls:]]  # the removal is planned and shown ...
    assert "apply" not in [c for c, _ in engine.calls[calls:]]  # ... and not applied
    assert len(result.deletes["sim"]) == 3
    assert audit_actions(loaded)[-1] == "op-return-dry-run"


def test_destroy_beyond_max_is_refused_before_anything_changes(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    applied(loaded, engine, tmp_path, "b", cpu=3)
    before = workdir(loaded).desired_file.read_bytes()
    calls = len(engine.calls)
    with pytest.raises(UsageError, match="the plan would delete 3 instances, more than --max 2"):
        destroy(loaded, ROOT, all_instances=True, max_destroy=2, wired=unit_ops(loaded, engine))
    assert workdir(loaded).desired_file.read_bytes() == before
    assert "apply" not in [c for c, _ in engine.calls[calls:]]
    result = destroy(loaded, ROOT, all_instances=True, max_destroy=3, wired=unit_ops(loaded, engine))
    assert len(result.removed["sim"]) == 3 and workdir(loaded).desired.read() == {}


def test_destroy_of_an_unknown_op_names_it_and_changes_nothing(
    loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path
) -> None:
    applied(loaded, engine, tmp_path, "b", cpu=1)
    before = workdir(loaded).desired_file.read_bytes()
    with pytest.raises(UsageError, match="--op op-00000000-000000: no instances of that op"):
        destroy(loaded, ROOT, ops=["op-00000000-000000"], wired=unit_ops(loaded, engine))
    assert workdir(loaded).desired_file.read_bytes() == before
    with pytest.raises(UsageError, match="name what to destroy"):
        destroy(loaded, ROOT, wired=unit_ops(loaded, engine))


def test_an_empty_wider_bundle_directory_is_tightened(loaded: LoadedConfig, engine: FakeEngine, tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    os.chmod(tmp_path / "b", 0o755)
    plan_burst(loaded, {"cpu": 1}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)
    assert mode(tmp_path / "b") == 0o700
