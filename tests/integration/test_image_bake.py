"""``xceprov image bake|list|delete`` and ``bake:newest`` on a whole simulated world (root only).

One world with simulated hosts (real SSH, the real play), driven through the command line:
a bake of ``cpu`` (the intent before the builder exists, the builder returned, the image listed
with its records), a bake whose play fails (the builder returned all the same, no image),
``bake:newest`` resolved in ``plan --json``, and ``image delete``: dry run, a foreign image
refused, the real delete fenced and audited.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim_world_helpers import SimWorld, can_run_hosts, world_with_hosts

from orchestrator.model.facts import FactKind

pytestmark = [pytest.mark.integration, pytest.mark.root]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    if not can_run_hosts():
        pytest.skip("simulated hosts need root and pycapnp (the node manager artifact)")
    site = tmp_path_factory.mktemp("bake-world") / "site"
    with world_with_hosts(site, f"ib-{secrets.token_hex(3)}", f"{os.getpid()}/image-bake") as w:
        config = w.site / "xceprov.yaml"
        cfg = yaml.safe_load(config.read_text())
        # A template whose play fails on the host (a role no path holds): the failed-bake case.
        broken = json.loads(json.dumps(cfg["templates"]["cpu"]))
        broken["bootstrap"] = {"groups": ["cpu"], "roles": ["xce_no_such_role"]}
        cfg["templates"]["broken"] = broken
        config.write_text(yaml.safe_dump(cfg))
        yield w


def _images(world: SimWorld) -> list[dict[str, Any]]:
    return list(json.loads(world.ok("image", "list", "--provider", "sim", "--json")))


def _op_instances(world: SimWorld, op_id: str) -> list[Any]:
    return world.store.list_instances({"xce:op_id": op_id}, include_terminated=True)


def test_bake_list_newest_and_delete(world: SimWorld) -> None:
    made = json.loads(world.ok("image", "bake", "cpu", "--provider", "sim", "--json"))
    image_id, op_id = made["image_id"], made["op_id"]
    assert image_id.startswith("img-"), made

    # The intent came before any cloud change of the op; the builder is gone, returned by the op.
    actions = [e["action"] for e in world.audit() if e.get("op") == op_id]
    assert actions.index("bake-intent") < actions.index("op-apply"), actions
    facts = [f for f in world.facts() if f.op_id == op_id]
    kinds = [f.kind for f in facts]
    assert kinds[0] == FactKind.REQUEST_INTENT and facts[0].detail.startswith("bake"), kinds
    assert FactKind.EXPECTED_HOST not in kinds  # a builder never joins
    # The builder's return is an op of its own: returning, then returned, for the builder's key.
    builder_key = made["builder"]["key"]
    after = [f.kind for f in world.facts() if f.instance_key == builder_key]
    assert after == [FactKind.INSTANCE_CREATED, FactKind.RETURNING, FactKind.RETURNED], after
    [builder] = _op_instances(world, op_id)
    assert builder.tags["xce:kind"] == "builder" and builder.state == "terminated"
    assert made["builder"]["returned"] is True

    # The image is listed, tagged for the template, with what it was built from.
    [listed] = [i for i in _images(world) if i["id"] == image_id]
    galaxy = yaml.safe_load((ROOT / "ansible" / "galaxy.yml").read_text())
    assert listed["template"] == "cpu" and listed["op_id"] == op_id
    assert listed["built_from"]["xce:built-from-image"] == "debian-12"
    assert listed["built_from"]["xce:role-version"] == str(galaxy["version"])
    assert len(listed["built_from"]["xce:node-manager-sha256"]) == 64
    assert listed["built_from"]["xce:site-roles"] == "none"
    # The image holds the builder's /opt/xce: what the bake installed.
    assert (world.sim / "images" / image_id / "opt" / "xce").is_dir()

    # The scan sees the image kept and the builder gone: no bake leftover.
    scan = json.loads(world.ok("orphans", "--json"))
    assert [f for f in scan["findings"] if f["class"] == "e"] == [], scan["findings"]

    # A failed play: no image, the builder returned all the same, exit 1.
    failed = world.xceprov("image", "bake", "broken", "--provider", "sim", "--json")
    assert failed.returncode == 1, failed.stderr
    assert "did not succeed" in failed.stderr and "builder is returned" in failed.stderr
    [bad] = [e for e in world.audit() if e["action"] == "bake-intent" and e.get("template") == "broken"]
    [builder] = _op_instances(world, bad["op"])
    assert builder.state == "terminated"
    assert [i["id"] for i in _images(world)] == [image_id]

    # bake:newest resolves to the image in the plan.
    config = world.site / "xceprov.yaml"
    cfg = yaml.safe_load(config.read_text())
    cfg["templates"]["cpu"]["providers"]["sim"]["image"] = "bake:newest"
    config.write_text(yaml.safe_dump(cfg))
    plan = json.loads(world.ok("plan", "cpu=1", "--json"))
    assert image_id in json.dumps(plan) and "bake:newest" not in json.dumps(plan)

    # image delete: a dry run changes nothing; a foreign image is refused; the delete is fenced.
    dry = world.ok("image", "delete", image_id, "--provider", "sim", "--dry-run")
    assert f"would delete image {image_id}" in dry
    assert [i["id"] for i in _images(world)] == [image_id]
    # An image that carries this cluster's tag but is no bake of it (no xce:kind, no op id).
    other = world.store.create_out_of_band("foreign", "c8.large", "debian-12", {"xce:cluster": "other-cluster"})
    foreign = world.store.create_image(other.id, "foreign", {"xce:cluster": world.cluster, "xce:provider": "sim"})
    try:
        refused = world.xceprov("image", "delete", foreign.id, "--provider", "sim")
        assert refused.returncode == 2 and "refused, nothing deleted" in refused.stderr, refused.stderr
        assert world.store.get_image(foreign.id).state == "available"
    finally:
        world.store.delete_image(foreign.id)
        world.store.delete(other.id)
    world.ok("image", "delete", image_id, "--provider", "sim")
    assert _images(world) == []
    deleted = [e for e in world.audit() if e["action"] in ("image-delete", "image-deleted")]
    assert [e["action"] for e in deleted] == ["image-delete", "image-deleted"]
    image_facts = [f.kind for f in world.facts() if f.instance_id == image_id]
    assert image_facts == [FactKind.RETURNING, FactKind.RETURNED]

    # A plan now says at once that no bake exists.
    done = world.xceprov("plan", "cpu=1")
    assert done.returncode == 2 and "bake:newest" in done.stderr and "no bake" in done.stderr
