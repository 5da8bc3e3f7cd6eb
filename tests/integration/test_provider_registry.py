"""A provider module added by CONTRIBUTING's recipe alone is known everywhere (issue 29, item 2).

The recipe ("Adding a provider module"): the module's directories under ``terraform/`` and one
entry in the provider-module registry (``orchestrator/model/modules.py``). The throw-away
module here is the simulated cloud's Terraform copied under a new name into a toolkit tree of
the test's own, with an entry whose error rules are its own: its hosts deleted behind
Terraform's back are ghost orphans and ``lost`` facts, and its capacity refusals fall back to the
next provider, in the real reconcile world (controller process, the cloud behind Terraform).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import MappingProxyType

import pytest
from reconcile_world import ROOT, agree, reconcile_world

from orchestrator.model.facts import FactKind
from orchestrator.model.modules import MODULES, TERRAFORM_RULES, ErrorRule, FailureClass, ProviderModule
from orchestrator.orphans.inputs import LinkController
from orchestrator.orphans.scan import OrphanScanner
from orchestrator.sim.controller import admin
from orchestrator.workspace.cloudview import read_drift
from orchestrator.workspace.terraform import engine_for
from orchestrator.workspace.workdir import ProviderWorkdir

pytestmark = pytest.mark.integration

NAME = "throwaway"

# Step 4 of the recipe: the registry entry, written as a contributor would.
ENTRY = ProviderModule(
    name=NAME,
    instance_types=("xcesim_instance",),
    # Its own rules: the simulated cloud's capacity code, and Terraform's shared rules.
    error_rules=(ErrorRule(FailureClass.CAPACITY, ("InsufficientCapacity",)), *TERRAFORM_RULES),
    default_settings=MappingProxyType({"store": "{{ sim_state_dir }}/cloud.sqlite"}),
)


@pytest.fixture
def toolkit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A toolkit tree holding the shipped simulated module and the throw-away one (steps 1-3)."""
    tree = tmp_path / "toolkit"
    (tree / "terraform").mkdir(parents=True)
    (tree / "templates").symlink_to(ROOT / "templates")
    for part in ("modules", "roots"):
        (tree / "terraform" / part).mkdir()
        (tree / "terraform" / part / "xcesim").symlink_to(ROOT / "terraform" / part / "xcesim")
        shutil.copytree(
            ROOT / "terraform" / part / "xcesim",
            tree / "terraform" / part / NAME,
            ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*", "examples"),
        )
    monkeypatch.setitem(MODULES, NAME, ENTRY)
    return tree


FIRST_THEN_SIM = {
    "first": {"module": NAME, "max_instances": 20, "priority": 20},
    "sim": {"module": "xcesim", "max_instances": 20, "priority": 10},
}
CPU = {
    "cpu": {
        "providers": {
            "first": {"flavor": "c8.large", "image": "debian-12"},
            "sim": {"flavor": "c4.large", "image": "debian-12"},
        }
    }
}
FAST_RETRY = {"retry": {"base": 1, "max": 2, "attempts": 3}, "cooldown": 0}


def test_its_capacity_refusal_falls_back_to_the_next_provider(tmp_path: Path, toolkit: Path) -> None:
    with reconcile_world(tmp_path, providers=FIRST_THEN_SIM, templates=CPU, policy=FAST_RETRY, root=toolkit) as world:
        world.store.set_capacity("c8.large", 0)
        admin.submit(world.ctl_state, "cpu", 2, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 2)
        [report] = world.passes(1)
        assert sorted(i.flavor for i in agree(world).values()) == ["c4.large"] * 2
        evidence = report.phase("scale-out").evidence.to_json()
        [failed] = evidence["failed"]
        assert failed["provider"] == "first" and failed["closed"] is True
        [created] = evidence["created"]
        assert created["provider"] == "sim" and created["count"] == 2
        [entry] = [e for e in world.audit() if e["action"] == "reconcile-op-failed"]
        assert entry["failure"]["class"] == "capacity" and entry["failure"]["matched"] == "InsufficientCapacity"
        assert entry["decision"] == "abandon"


ONLY_FIRST = {"first": {"module": NAME, "max_instances": 20}}
CPU_FIRST = {"cpu": {"providers": {"first": {"flavor": "c8.large", "image": "debian-12"}}}}


def test_its_hosts_deleted_behind_terraform_are_ghost_orphans_and_lost(tmp_path: Path, toolkit: Path) -> None:
    orphans = {"orphans": {"breaker_min": 10, "settle_window": 0}}
    with reconcile_world(tmp_path, providers=ONLY_FIRST, templates=CPU_FIRST, policy=orphans, root=toolkit) as world:
        kept, gone = world.executor.create("first", "cpu", 2).created
        world.join(kept)
        world.store.delete_out_of_band(gone.instance_id)
        config = world.reconciler.config
        # The drift is read as a host's: the cloud view of the provider's directory names it.
        workdir = ProviderWorkdir(config, "first", toolkit)
        assert read_drift(engine_for(config), workdir.path).deleted == {gone.key: gone.instance_id}
        scanner = OrphanScanner(config, world.ops, LinkController(world.link), world.clock, config.state_dir)
        report = scanner.scan(act=True, provider="first")
        outcomes = {(f.cls, f.instance_key): f.outcome for f in report.findings}
        assert outcomes == {("c", gone.key): "taken"}, outcomes
        lost = [f for f in world.facts() if f.kind == FactKind.LOST]
        assert [(f.instance_key, f.instance_id) for f in lost] == [(gone.key, gone.instance_id)]
