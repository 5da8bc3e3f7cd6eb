"""A provider module added by CONTRIBUTING's recipe alone is known everywhere (issue 29, item 2).

The recipe ("Adding a provider module"): the module's directories under ``terraform/`` and one
entry in the provider-module registry (``orchestrator/model/modules.py``). The throw-away
module here is the simulated cloud's Terraform copied under a new name into a toolkit tree of
the test's own, with an entry whose error rules are its own: its hosts deleted behind
Terraform's back are ghost orphans and ``lost`` facts, and its capacity refusals fall back to the
next provider, in the real reconcile world (controller process, the cloud behind Terraform).

A second throw-away copy is a module whose cloud's labels take only lower-case letters, digits,
``_`` and ``-``: its entry maps every toolkit tag key (``xce:cluster`` → ``xce_cluster``) and
encodes values (``_`` escape). Its instances carry the labels, are read back as owned, listed
and scanned; objects with other labels are never taken for its own.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from types import MappingProxyType

import pytest
from reconcile_world import ROOT, agree, reconcile_world

from orchestrator.clients.ansible.inventory import records_from_workdirs
from orchestrator.model import tags as owner
from orchestrator.model.facts import FactKind
from orchestrator.model.modules import (
    MODULES,
    TERRAFORM_RULES,
    XCESIM_RULES,
    ErrorRule,
    FailureClass,
    ProviderModule,
)
from orchestrator.orphans.inputs import LinkController
from orchestrator.orphans.scan import OrphanScanner
from orchestrator.sim.controller import admin
from orchestrator.workspace.cloudview import read_drift, read_listing
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


def _toolkit(tmp_path: Path, name: str) -> Path:
    """A toolkit tree holding the shipped simulated module and a copy of it named ``name`` (steps 1-3)."""
    tree = tmp_path / "toolkit"
    (tree / "terraform").mkdir(parents=True)
    (tree / "templates").symlink_to(ROOT / "templates")
    for part in ("modules", "roots"):
        (tree / "terraform" / part).mkdir()
        (tree / "terraform" / part / "xcesim").symlink_to(ROOT / "terraform" / part / "xcesim")
        shutil.copytree(
            ROOT / "terraform" / part / "xcesim",
            tree / "terraform" / part / name,
            ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*", "examples"),
        )
    return tree


@pytest.fixture
def toolkit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The throw-away module's tree, its entry registered."""
    tree = _toolkit(tmp_path, NAME)
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


LABELLED = "labelled"
# Labels of lower-case letters, digits, "_" and "-", at most 63 of them: every toolkit tag key
# mapped, values that hold other characters encoded after the "_" escape.
LABEL_KEYS = {key: key.replace(":", "_") for key in owner.TOOLKIT_TAGS}
LABELLED_ENTRY = ProviderModule(
    name=LABELLED,
    instance_types=("xcesim_instance",),
    error_rules=XCESIM_RULES + TERRAFORM_RULES,
    tag_keys=LABEL_KEYS,
    tag_chars="[a-z0-9_-]",
    tag_escape="_",
    tag_max_length=63,
    default_settings=MappingProxyType({"store": "{{ sim_state_dir }}/cloud.sqlite"}),
)
ONLY_LABELLED = {"lab": {"module": LABELLED, "max_instances": 20}}
CPU_LABELLED = {"cpu": {"providers": {"lab": {"flavor": "c8.large", "image": "debian-12"}}}}


@pytest.fixture
def labelled_toolkit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The labelled module: its Terraform names the label keys (the hand-written main.tf as its
    author writes it, variables.tf and the root as scripts/tf_contract.py writes them for its
    entry: each quoted toolkit key is its label key)."""
    tree = _toolkit(tmp_path, LABELLED)
    for part in ("modules", "roots"):
        for file in (tree / "terraform" / part / LABELLED).rglob("*.tf"):
            text = file.read_text()
            for key, label in LABEL_KEYS.items():
                text = text.replace(f'"{key}"', f'"{label}"')
            file.write_text(text)
    monkeypatch.setitem(MODULES, LABELLED, LABELLED_ENTRY)
    return tree


def test_a_module_whose_labels_map_the_owner_tags_owns_lists_and_scans_its_hosts(
    tmp_path: Path, labelled_toolkit: Path
) -> None:
    orphans = {"orphans": {"breaker_min": 10, "settle_window": 0}}
    with reconcile_world(
        tmp_path, providers=ONLY_LABELLED, templates=CPU_LABELLED, policy=orphans, root=labelled_toolkit
    ) as world:
        cluster, config = world.cluster, world.ops.parts.config
        kept, gone = world.executor.create("lab", "cpu", 2).created
        world.join(kept)
        # Created with the module's labels: mapped keys, the epoch's "." encoded, no "xce:" key.
        made = {i.client_token: i.tags for i in world.store.list_instances({"xce_cluster": cluster})}
        assert sorted(made) == sorted([kept.key, gone.key])
        labels = dict(made[kept.key])
        assert sorted(labels) == [
            "xce_cluster",
            "xce_epoch",
            "xce_offering",
            "xce_op_id",
            "xce_provider",
            "xce_template",
        ]
        assert re.fullmatch(r"_[0-9]+_2e[0-9]+", labels["xce_epoch"]), labels
        assert labels["xce_offering"] == "_c8_2elarge"  # the offering c8.large, encoded as the epoch
        # Terraform's desired set holds the labels; read back, the owner tags.
        workdir = ProviderWorkdir(config, "lab", labelled_toolkit)
        document = json.loads(workdir.desired_file.read_text())
        assert document["common_tags"] == {"xce_cluster": cluster, "xce_provider": "lab"}
        assert document["instances"][kept.key]["tags"] == labels
        tags = workdir.desired.read()[kept.key].tags
        epoch = tags[owner.EPOCH]
        assert re.fullmatch(r"[0-9]+\.[0-9]+", epoch) and tags[owner.CLUSTER] == cluster, tags
        # The inventory reads the state's labels back too: the host's template and op.
        [record] = [
            r
            for r in records_from_workdirs(config.state_dir, cluster, labels={"lab": workdir.labels})
            if r.key == kept.key
        ]
        assert (record.template, record.op_id, record.provider) == ("cpu", tags[owner.OP_ID], "lab")

        # Besides: a stray with this module's labels (no fact), one with the owner tags under
        # the literal keys (not this module's: never read as the toolkit's), one of another
        # cluster, an untagged one; and a host deleted behind Terraform's back.
        for name, other in (
            ("stray", {"xce_cluster": cluster, "xce_provider": "lab"}),
            ("literal", {"xce_cluster": cluster, "xce:cluster": cluster, "xce:provider": "lab"}),
            ("theirs", {"xce_cluster": "other", "xce_provider": "lab"}),
            ("bare", {}),
        ):
            world.store.create_instance(name, "c8.large", "debian-12", other, "", "")
        world.store.delete_out_of_band(gone.instance_id)

        # Listed as owned: the listing's labels are read back as owner tags.
        listing = read_listing(engine_for(config), workdir.path, workdir.labels)
        listed = {o.name: o.tags for o in listing.objects if o.state == "running"}
        assert listed == {
            kept.name: {**tags},
            "stray": {owner.CLUSTER: cluster, owner.PROVIDER: "lab"},
            "literal": {owner.CLUSTER: cluster},
        }

        scanner = OrphanScanner(config, world.ops, LinkController(world.link), world.clock, config.state_dir)
        report = scanner.scan(act=True, provider="lab")
        outcomes = {(f.cls, f.instance_key or f.name): f.outcome for f in report.findings}
        assert outcomes == {("c", gone.key): "taken", ("b", "stray"): "reported"}, outcomes
        # The joined host is owned (no finding); nothing else was touched.
        alive = sorted(i.name for i in world.store.list_instances({}))
        assert alive == sorted([kept.name, "stray", "literal", "theirs", "bare"])
        lost = [f for f in world.facts() if f.kind == FactKind.LOST]
        assert [(f.instance_key, f.instance_id) for f in lost] == [(gone.key, gone.instance_id)]
