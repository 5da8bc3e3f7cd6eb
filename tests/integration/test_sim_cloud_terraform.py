"""Real Terraform (the bundled engine) against the ``xcesim`` provider from a local mirror."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.clients.terraform.engine import BundledEngine
from orchestrator.clients.terraform.messages import ApplyFailed
from orchestrator.clients.terraform.mirror import XCESIM, ensure_mirror, plugin_cache_dir
from orchestrator.sim.cloud.store import REASON_EXPIRED, CloudStore

pytestmark = pytest.mark.integration

# A tiny root configuration: values only ever enter as variables, never as Terraform code.
REQUIRED_XCESIM = """
terraform {
  required_providers {
    xcesim = {
      source  = "registry.terraform.io/xce/xcesim"
      version = "0.1.0"
    }
  }
}
"""

MAIN_TF = (
    REQUIRED_XCESIM
    + """
variable "store" {
  type = string
}

variable "max_retries" {
  type    = number
  default = 0
}

variable "instances" {
  type = map(object({
    name      = string
    flavor    = string
    image     = string
    tags      = map(string)
    user_data = string
    power_state = optional(string)
  }))
}

provider "xcesim" {
  store       = var.store
  max_retries = var.max_retries
}

resource "xcesim_instance" "this" {
  for_each     = var.instances
  name         = each.value.name
  flavor       = each.value.flavor
  image        = each.value.image
  tags         = each.value.tags
  user_data    = each.value.user_data
  client_token = each.key
  power_state  = each.value.power_state
}

data "xcesim_instances" "cluster" {
  tags       = { "xce:cluster" = "itest" }
  depends_on = [xcesim_instance.this]
}

output "ids" {
  value = { for k, v in xcesim_instance.this : k => v.id }
}

output "listed" {
  value = data.xcesim_instances.cluster.instances
}
"""
)

HOSTILE_NAME = 'web "1" ${var.store} %{ if true }x%{ endif }'
HOSTILE_TAG = 'resource "null" "x" {}\n${file("/etc/passwd")}\t%{for x in y}z%{endfor} "quoted" \\back'


@dataclass
class Workspace:
    """One Terraform working directory with its own cloud store."""

    workdir: Path
    engine: BundledEngine
    store: CloudStore

    def write_vars(self, instances: dict[str, dict[str, Any]], max_retries: int = 0) -> Path:
        doc = {"store": str(self.store.path), "max_retries": max_retries, "instances": instances}
        path = self.workdir / "desired.tfvars.json"
        path.write_text(json.dumps(doc, indent=1))
        return path


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspace]:
    cli_config = ensure_mirror(tmp_path / "tf", [XCESIM])
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "main.tf").write_text(MAIN_TF)
    cache = plugin_cache_dir(tmp_path / "tf")
    engine = BundledEngine(cli_config=cli_config, plugin_cache_dir=cache, timeout=300)
    engine.init(workdir)
    store = CloudStore(tmp_path / "sim" / "cloud.sqlite")
    yield Workspace(workdir, engine, store)
    store.close()


def _instances(n: int, flavor: str = "c8.large", **extra_tags: str) -> dict[str, dict[str, Any]]:
    return {
        f"op1-{i}": {
            "name": f"burst-{i}",
            "flavor": flavor,
            "image": "debian-12",
            "tags": {"xce:cluster": "itest", "xce:op_id": "op1", **extra_tags},
            "user_data": "#cloud-config\n",
        }
        for i in range(n)
    }


def test_apply_creates_instances_and_hostile_values_arrive_literally(ws: Workspace) -> None:
    desired = _instances(4, odd=HOSTILE_TAG)
    desired["op1-0"]["name"] = HOSTILE_NAME
    desired["op1-0"]["user_data"] = '#!/bin/sh\necho "${HOME}" %{x}\n'
    result = ws.engine.apply(ws.workdir, var_files=[ws.write_vars(desired)])
    assert result.summary.add == 4

    live = {i.client_token: i for i in ws.store.list_instances({"xce:cluster": "itest"})}
    assert set(live) == set(desired)
    assert live["op1-0"].name == HOSTILE_NAME
    assert live["op1-0"].user_data == desired["op1-0"]["user_data"]
    assert all(i.tags["odd"] == HOSTILE_TAG and i.state == "running" for i in live.values())
    assert len({i.address for i in live.values()}) == 4

    outputs = ws.engine.output(ws.workdir)
    assert outputs["ids"] == {k: i.id for k, i in live.items()}
    listed = {o["id"]: o for o in outputs["listed"]}
    assert set(listed) == {i.id for i in live.values()}
    assert listed[live["op1-0"].id]["name"] == HOSTILE_NAME
    assert listed[live["op1-0"].id]["tags"]["odd"] == HOSTILE_TAG

    # Nothing left to do: the provider reports exactly what Terraform asked for.
    assert not ws.engine.plan(ws.workdir, var_files=[ws.write_vars(desired)]).has_changes


def test_refresh_only_plan_shows_an_out_of_band_delete_as_drift(ws: Workspace) -> None:
    vars_file = ws.write_vars(_instances(3))
    ws.engine.apply(ws.workdir, var_files=[vars_file])
    victim = next(i for i in ws.store.list_instances() if i.client_token == "op1-1")
    ws.store.delete_out_of_band(victim.id)

    plan = ws.engine.plan(ws.workdir, var_files=[vars_file], refresh_only=True)
    assert plan.has_changes
    assert [(d.addr, d.action) for d in plan.drift] == [('xcesim_instance.this["op1-1"]', "delete")]

    # A normal plan then re-creates exactly that instance (with the same client token).
    plan = ws.engine.plan(ws.workdir, var_files=[vars_file])
    managed = [(c.addr, c.action) for c in plan.changes if c.type == "xcesim_instance"]
    assert managed == [('xcesim_instance.this["op1-1"]', "create")]


def test_tag_change_updates_in_place_and_name_change_replaces(ws: Workspace) -> None:
    desired = _instances(2)
    ws.engine.apply(ws.workdir, var_files=[ws.write_vars(desired)])
    before = {i.client_token: i for i in ws.store.list_instances()}

    desired["op1-0"]["tags"]["xce:epoch"] = "3.1"
    desired["op1-1"]["name"] = "renamed"
    plan = ws.engine.plan(ws.workdir, var_files=[ws.write_vars(desired)])
    actions = {c.addr: c.action for c in plan.changes}
    assert actions['xcesim_instance.this["op1-0"]'] == "update"
    assert actions['xcesim_instance.this["op1-1"]'] == "replace"
    ws.engine.apply(ws.workdir, var_files=[ws.write_vars(desired)])

    after = {i.client_token: i for i in ws.store.list_instances()}
    assert after["op1-0"].id == before["op1-0"].id and after["op1-0"].tags["xce:epoch"] == "3.1"
    assert after["op1-1"].id != before["op1-1"].id and after["op1-1"].name == "renamed"
    old = ws.store.get(before["op1-1"].id)
    assert old is not None and old.state == "terminated"


def test_an_apply_stops_and_starts_an_instance_in_place(ws: Workspace) -> None:
    desired = _instances(2)
    ws.engine.apply(ws.workdir, var_files=[ws.write_vars(desired)])
    before = {i.client_token: i for i in ws.store.list_instances()}

    desired["op1-0"]["power_state"] = "stopped"
    plan = ws.engine.plan(ws.workdir, var_files=[ws.write_vars(desired)])
    resources = {c.addr: c.action for c in plan.changes if c.addr.startswith("xcesim_instance.")}
    assert resources == {'xcesim_instance.this["op1-0"]': "update"}  # in place, no replacement
    result = ws.engine.apply(ws.workdir, var_files=[ws.write_vars(desired)])
    assert (result.summary.add, result.summary.change, result.summary.remove) == (0, 1, 0)
    stopped = ws.store.get(before["op1-0"].id)
    assert stopped is not None and stopped.state == "stopped"
    # Same instance: id, address and tags unchanged; listings by tag still show it.
    assert (stopped.address, stopped.tags) == (before["op1-0"].address, before["op1-0"].tags)
    assert {i.id for i in ws.store.list_instances({"xce:cluster": "itest"})} == {i.id for i in before.values()}
    listed = {o["id"]: o["state"] for o in ws.engine.output(ws.workdir)["listed"]}
    assert listed[stopped.id] == "stopped"
    assert not ws.engine.plan(ws.workdir, var_files=[ws.write_vars(desired)]).has_changes

    desired["op1-0"]["power_state"] = "running"
    ws.engine.apply(ws.workdir, var_files=[ws.write_vars(desired)])
    started = ws.store.get(before["op1-0"].id)
    assert started is not None and started.state == "running" and started.address == before["op1-0"].address
    assert [(m.action, m.client_token) for m in ws.store.mutations() if m.action in ("stop", "start")] == [
        ("stop", "op1-0"),
        ("start", "op1-0"),
    ]


def test_capacity_error_reaches_terraform_diagnostics(ws: Workspace) -> None:
    ws.store.set_capacity("g4.xlarge", 2)
    vars_file = ws.write_vars(_instances(3, flavor="g4.xlarge"))
    with pytest.raises(ApplyFailed) as err:
        ws.engine.apply(ws.workdir, var_files=[vars_file])
    assert "InsufficientCapacity: flavor g4.xlarge has no capacity (limit 2)" in str(err.value)
    assert any(
        d.summary == "InsufficientCapacity: flavor g4.xlarge has no capacity (limit 2)"
        for d in err.value.result.diagnostics
    )
    assert len([c for c in err.value.result.changes if c.action == "create"]) == 2
    assert len(ws.store.list_instances()) == 2

    # With capacity back the same apply completes; the two made before are not made again.
    ws.store.set_capacity("g4.xlarge", None)
    ws.engine.apply(ws.workdir, var_files=[vars_file])
    assert len(ws.store.list_instances()) == 3


def test_api_errors_fail_or_are_retried_by_the_provider(ws: Workspace) -> None:
    ws.store.set_error_rate(1.0)
    with pytest.raises(ApplyFailed) as err:
        ws.engine.apply(ws.workdir, var_files=[ws.write_vars(_instances(2))])
    assert "InternalError: simulated API failure during create" in str(err.value)
    assert ws.store.list_instances() == []

    ws.store.set_error_rate(0.3, seed=7)
    ws.engine.apply(ws.workdir, var_files=[ws.write_vars(_instances(6), max_retries=30)])
    ws.store.clear_faults()
    assert len(ws.store.list_instances()) == 6


def test_lost_create_response_then_retry_makes_no_twin(ws: Workspace) -> None:
    """The crash between the cloud call and the state write: the client token saves the day."""
    vars_file = ws.write_vars(_instances(3))
    ws.store.set_lost_response(1.0)
    with pytest.raises(ApplyFailed, match="RequestTimeout"):
        ws.engine.apply(ws.workdir, var_files=[vars_file])
    made = {i.client_token: i.id for i in ws.store.list_instances()}
    assert set(made) == {"op1-0", "op1-1", "op1-2"}  # in the cloud, not in Terraform's state
    ws.store.clear_faults()
    ws.engine.apply(ws.workdir, var_files=[vars_file])
    assert {i.client_token: i.id for i in ws.store.list_instances()} == made
    assert ws.engine.output(ws.workdir)["ids"] == made


def test_destroy_terminates_everything(ws: Workspace) -> None:
    vars_file = ws.write_vars(_instances(3))
    ws.engine.apply(ws.workdir, var_files=[vars_file])
    stray = ws.store.create_out_of_band("stray", "c8.large", "debian-12", {"xce:cluster": "itest"})
    plan = ws.engine.plan(ws.workdir, var_files=[vars_file], destroy=True, out=Path("destroy.tfplan"))
    assert plan.summary.remove == 3
    ws.engine.apply(ws.workdir, plan_file=Path("destroy.tfplan"))
    # Terraform removes what it made and nothing else.
    assert [i.id for i in ws.store.list_instances()] == [stray.id]
    assert ws.engine.show_state(ws.workdir).get("values") in (None, {}, {"root_module": {}})


REPO = Path(__file__).resolve().parents[2]


def _project_workdir(tmp_path: Path) -> tuple[Path, BundledEngine, CloudStore]:
    """terraform/roots/xcesim + terraform/modules/xcesim, laid out as the orchestrator does, initialised."""
    root_tf = REPO / "terraform" / "roots" / "xcesim" / "main.tf"
    module_dir = REPO / "terraform" / "modules" / "xcesim"
    if not root_tf.is_file() or not (module_dir / "main.tf").is_file():
        pytest.skip("the xcesim root or module is not in this checkout")
    workdir = tmp_path / "work"
    (workdir / "module").mkdir(parents=True)
    (workdir / "main.tf").write_text(root_tf.read_text())
    for tf_file in module_dir.glob("*.tf"):
        (workdir / "module" / tf_file.name).write_text(tf_file.read_text())
    cli_config = ensure_mirror(tmp_path / "tf", [XCESIM])
    engine = BundledEngine(cli_config=cli_config, plugin_cache_dir=plugin_cache_dir(tmp_path / "tf"), timeout=300)
    engine.init(workdir)
    return workdir, engine, CloudStore(tmp_path / "sim" / "cloud.sqlite")


def _write_desired(workdir: Path, store: CloudStore, instances: dict[str, dict[str, Any]]) -> Path:
    doc = {
        "instances": instances,
        "common_tags": {"xce:cluster": "itest", "xce:provider": "sim"},
        "settings": {"store": str(store.path)},
    }
    (workdir / "desired.tfvars.json").write_text(json.dumps(doc))
    return Path("desired.tfvars.json")


def test_the_project_module_and_root_work_against_the_provider(tmp_path: Path) -> None:
    """terraform/roots/xcesim + terraform/modules/xcesim, laid out as the orchestrator does."""
    workdir, engine, store = _project_workdir(tmp_path)

    instances = {
        f"op9-{i}": {
            "name": HOSTILE_NAME if i == 0 else f"cpu-{i}",
            "template": "cpu",
            "flavor": "c8.large",
            "image": "debian-12",
            "tags": {"xce:op_id": "op9", "xce:template": "cpu", "xce:epoch": "1.1", "odd": HOSTILE_TAG},
            "user_data": "#cloud-config\n",
        }
        for i in range(3)
    }
    vars_file = _write_desired(workdir, store, instances)
    engine.apply(workdir, var_files=[vars_file])

    live = {i.client_token: i for i in store.list_instances({"xce:cluster": "itest"})}
    assert set(live) == set(instances)
    assert live["op9-0"].name == HOSTILE_NAME and live["op9-0"].tags["odd"] == HOSTILE_TAG
    assert live["op9-1"].tags["xce:provider"] == "sim"
    outputs = engine.output(workdir)
    assert {k: v["id"] for k, v in outputs["instances"].items()} == {k: i.id for k, i in live.items()}

    # The module's listing sees an instance Terraform never made; drift sees an out-of-band delete.
    stray = store.create_out_of_band("stray", "c8.large", "debian-12", {"xce:cluster": "itest"})
    store.delete_out_of_band(live["op9-2"].id)
    plan = engine.plan(workdir, var_files=[vars_file], refresh_only=True)
    assert [(d.addr, d.action) for d in plan.drift] == [('module.instances.xcesim_instance.this["op9-2"]', "delete")]
    engine.apply(workdir, var_files=[vars_file])
    assert stray.id in engine.output(workdir)["tagged"]
    store.close()


def test_the_cloud_ends_an_instance_past_its_max_lifetime_and_a_refresh_sees_it_gone(tmp_path: Path) -> None:
    """The backstop: the instance with a lifetime is terminated by the cloud itself; drift shows it."""
    workdir, engine, store = _project_workdir(tmp_path)
    instances = {
        f"op7-{i}": {
            "name": f"cpu-{i}",
            "template": "cpu",
            "flavor": "c8.large",
            "image": "debian-12",
            "tags": {"xce:op_id": "op7", "xce:template": "cpu", "xce:epoch": "1.1", **lifetime},
            "user_data": "#cloud-config\n",
        }
        for i, lifetime in enumerate([{"xce:max_lifetime": "120"}, {}])
    }
    vars_file = _write_desired(workdir, store, instances)
    engine.apply(workdir, var_files=[vars_file])
    made = {i.client_token: i for i in store.list_instances({"xce:cluster": "itest"})}
    assert set(made) == {"op7-0", "op7-1"} and made["op7-0"].expires_at and not made["op7-1"].expires_at

    # The cloud an hour later (an explicit clock, no waiting): whoever looks first, here a
    # listing, finds the short-lived instance ended by the cloud, reason "expired".
    later = CloudStore(store.path, clock=lambda: time.time() + 3600)
    assert [i.client_token for i in later.list_instances({"xce:cluster": "itest"})] == ["op7-1"]
    ended = later.get(made["op7-0"].id)
    assert ended is not None and (ended.state, ended.state_reason) == ("terminated", REASON_EXPIRED)
    assert ended.terminated_at == ended.expires_at
    later.close()

    # Terraform's refresh sees exactly that instance gone, as for any delete behind its back.
    plan = engine.plan(workdir, var_files=[vars_file], refresh_only=True, out=Path("refresh.tfplan"))
    assert [(d.addr, d.action) for d in plan.drift] == [('module.instances.xcesim_instance.this["op7-0"]', "delete")]
    engine.apply(workdir, plan_file=Path("refresh.tfplan"))
    outputs = engine.output(workdir)
    assert set(outputs["instances"]) == {"op7-1"}
    # The listing keeps recently terminated objects, with the cloud's reason, for the host-loss path.
    tagged = outputs["tagged"]
    live = {oid for oid, obj in tagged.items() if obj["state"] != "terminated"}
    assert live == {made["op7-1"].id}
    assert (tagged[made["op7-0"].id]["state"], tagged[made["op7-0"].id]["state_reason"]) == ("terminated", "expired")
    store.close()


# A builder instance, an image of it and a worker from that image: each step a variable.
IMAGE_TF = (
    REQUIRED_XCESIM
    + """
variable "store" {
  type = string
}

variable "builder_power" {
  type = string
}

variable "make_image" {
  type = bool
}

variable "from_image" {
  type = bool
}

locals {
  owner = { "xce:cluster" = "itest", "xce:provider" = "sim" }
}

provider "xcesim" {
  store = var.store
  fence = "7.1"
}

resource "xcesim_instance" "builder" {
  name         = "builder"
  flavor       = "c8.large"
  image        = "debian-12"
  tags         = local.owner
  client_token = "bake-cpu"
  power_state  = var.builder_power
}

resource "xcesim_image" "cpu" {
  count       = var.make_image ? 1 : 0
  name        = "cpu"
  instance_id = xcesim_instance.builder.id
  tags        = merge(local.owner, { "xce:template" = "cpu" })
}

resource "xcesim_instance" "worker" {
  count        = var.from_image ? 1 : 0
  name         = "worker"
  flavor       = "c8.large"
  image        = xcesim_image.cpu[0].id
  tags         = local.owner
  client_token = "op-1-0"
}

data "xcesim_images" "mine" {
  tags       = local.owner
  depends_on = [xcesim_image.cpu]
}

output "image_ids" {
  value = xcesim_image.cpu[*].id
}

output "listed_images" {
  value = data.xcesim_images.mine.images
}
"""
)


def test_an_image_made_by_terraform_from_a_stopped_builder_starts_a_new_instance_with_its_files(
    ws: Workspace,
) -> None:
    (ws.workdir / "main.tf").write_text(IMAGE_TF)
    state_dir = ws.store.path.parent

    def apply(power: str, make_image: bool, from_image: bool) -> Any:
        doc = {"store": str(ws.store.path), "builder_power": power, "make_image": make_image, "from_image": from_image}
        (ws.workdir / "steps.tfvars.json").write_text(json.dumps(doc))
        return ws.engine.apply(ws.workdir, var_files=[ws.workdir / "steps.tfvars.json"])

    apply("running", False, False)
    (builder,) = ws.store.list_instances()
    # What the builder's host wrote (its disk, as the host manager keeps it; tests/integration/
    # test_sim_hosts.py checks the same through a real host and SSH).
    upper = state_dir / "hosts" / builder.id / "upper"
    (upper / "etc/xce").mkdir(parents=True)
    (upper / "etc/xce/node.conf").write_text("baked\n")
    (upper / "opt/xce").mkdir(parents=True)
    (upper / "opt/xce/VERSION").write_text("1\n")

    # Stop the builder in place and make the image of it, in one apply.
    result = apply("stopped", True, False)
    assert (result.summary.add, result.summary.change, result.summary.remove) == (1, 1, 0)
    stopped = ws.store.get(builder.id)
    assert stopped is not None and stopped.state == "stopped" and stopped.address == builder.address
    (image_id,) = ws.engine.output(ws.workdir)["image_ids"]
    image = ws.store.get_image(image_id)
    assert image is not None and (image.instance_id, image.source_image) == (builder.id, "debian-12")
    assert image.tags == {"xce:cluster": "itest", "xce:provider": "sim", "xce:template": "cpu"}
    assert [i["id"] for i in ws.engine.output(ws.workdir)["listed_images"]] == [image_id]

    apply("stopped", True, True)
    worker = next(i for i in ws.store.list_instances() if i.name == "worker")
    assert worker.image == image_id
    assert (state_dir / "hosts" / worker.id / "upper/etc/xce/node.conf").read_text() == "baked\n"
    assert (state_dir / "hosts" / worker.id / "upper/opt/xce/VERSION").read_text() == "1\n"
    assert not apply("stopped", True, True).summary.add  # nothing left to do

    plan = ws.engine.plan(
        ws.workdir, var_files=[ws.workdir / "steps.tfvars.json"], destroy=True, out=Path("destroy.tfplan")
    )
    assert plan.summary.remove == 3
    ws.engine.apply(ws.workdir, plan_file=Path("destroy.tfplan"))
    gone = ws.store.get_image(image_id)
    assert gone is not None and gone.state == "deleted"
    assert not (state_dir / "images" / image_id).exists()
    assert ws.store.list_instances() == [] and ws.store.list_images() == []
    journal = [(m.action, m.epoch) for m in ws.store.mutations() if m.instance_id == image_id]
    assert journal == [("create-image", "7.1"), ("delete-image", "7.1")]
