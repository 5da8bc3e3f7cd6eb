"""Cloud views and host loss through the bundled Terraform, the xcesim module and its provider."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.clients.terraform.engine import BundledEngine
from orchestrator.clients.terraform.mirror import XCESIM, ensure_mirror, plugin_cache_dir
from orchestrator.errors import TerraformError
from orchestrator.model.labels import AS_IS  # the simulated cloud labels with the tags as they are
from orchestrator.ops.hostloss import MISSING, SUSPECTS_FILE, LossTracker
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.workspace.cloudview import drift_from_stream, read_drift, read_listing, read_views
from orchestrator.workspace.desired import DESIRED
from orchestrator.workspace.terraform import instances_output

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "cvtest"


@dataclass
class Provider:
    """A provider working directory laid out as the orchestrator lays it out, and its cloud."""

    workdir: Path
    engine: BundledEngine
    store: CloudStore


@pytest.fixture
def sim(tmp_path: Path) -> Iterator[Provider]:
    workdir = tmp_path / "work"
    workdir.mkdir()
    shutil.copy(REPO / "terraform" / "roots" / "xcesim" / "main.tf", workdir / "main.tf")
    (workdir / "module").mkdir()
    for tf_file in (REPO / "terraform" / "modules" / "xcesim").glob("*.tf"):
        shutil.copy(tf_file, workdir / "module" / tf_file.name)
    engine = BundledEngine(
        cli_config=ensure_mirror(tmp_path / "tf", [XCESIM]),
        plugin_cache_dir=plugin_cache_dir(tmp_path / "tf"),
        timeout=300,
    )
    engine.init(workdir)
    store = CloudStore(tmp_path / "sim" / "cloud.sqlite")
    try:
        yield Provider(workdir, engine, store)
    finally:
        store.close()


def write_desired(p: Provider, count: int) -> None:
    instances = {
        f"op3-{i}": {
            "name": f"cpu-{i}",
            "template": "cpu",
            "flavor": "c8.large",
            "image": "debian-12",
            "tags": {"xce:op_id": "op3", "xce:template": "cpu", "xce:epoch": "1.1"},
            "user_data": "",
        }
        for i in range(count)
    }
    doc = {
        "instances": instances,
        "common_tags": {"xce:cluster": CLUSTER, "xce:provider": "sim"},
        "settings": {"store": str(p.store.path)},
    }
    (p.workdir / DESIRED).write_text(json.dumps(doc))


def test_drift_listing_and_host_loss_after_reclaim_and_delete(sim: Provider) -> None:
    write_desired(sim, 3)
    sim.engine.apply(sim.workdir, var_files=[Path(DESIRED)])
    live = {i.client_token: i for i in sim.store.list_instances({"xce:cluster": CLUSTER})}
    assert sorted(live) == ["op3-0", "op3-1", "op3-2"]
    # Nothing has happened yet: no drift, all three listed running.
    views = read_views(sim.engine, sim.workdir, AS_IS)
    assert views.drift.deleted == {} and views.drift.changed == {}
    assert {o.id: o.state for o in views.listing.objects} == {i.id: "running" for i in live.values()}

    (reclaimed,) = sim.store.spot_reclaim(instance_id=live["op3-0"].id)
    sim.store.delete_out_of_band(live["op3-1"].id)
    other = sim.store.create_out_of_band("stray", "c8.large", "debian-12", {"xce:cluster": "someone-else"})
    untagged = sim.store.create_out_of_band("bare", "c8.large", "debian-12", {})
    sim.store.update_tags(live["op3-2"].id, {**live["op3-2"].tags, "touched": "by hand"})

    drift = read_drift(sim.engine, sim.workdir)
    assert drift.deleted == {"op3-0": live["op3-0"].id, "op3-1": live["op3-1"].id}
    assert drift.changed == {"op3-2": ["tags"]}

    # A normal plan (what a create op runs) refreshes too: its -json stream carries the same
    # deletions as drift, and plans a create for each deleted key still desired.
    state_ids = {k: str(v["id"]) for k, v in instances_output(sim.engine.output(sim.workdir), AS_IS).items()}
    normal = sim.engine.plan(sim.workdir, var_files=[Path(DESIRED)])
    assert drift_from_stream(normal, lambda: state_ids).deleted == drift.deleted
    assert sorted(str(c.key) for c in normal.changes if c.action == "create") == ["op3-0", "op3-1"]

    listing = read_listing(sim.engine, sim.workdir, AS_IS)
    assert listing.supported
    seen = listing.by_id()
    assert other.id not in seen and untagged.id not in seen  # not this cluster's
    assert (seen[reclaimed.id].state, seen[reclaimed.id].state_reason) == ("terminated", "spot-reclaim")
    assert (seen[live["op3-1"].id].state, seen[live["op3-1"].id].state_reason) == (
        "terminated",
        "out-of-band-delete",
    )
    kept = seen[live["op3-2"].id]
    assert (kept.state, kept.name, kept.address) == ("running", "cpu-2", live["op3-2"].address)
    assert kept.tags["xce:op_id"] == "op3" and kept.tags["touched"] == "by hand"

    tracker = LossTracker(sim.workdir / SUSPECTS_FILE)
    first = tracker.observe(drift, listing)
    assert [(x.instance_key, x.reason) for x in first] == [("op3-0", "spot-reclaim")]

    # Reading changed nothing in the state: the second read shows the same drift.
    again = read_views(sim.engine, sim.workdir, AS_IS)
    assert again.drift.deleted == drift.deleted
    second = tracker.observe(again.drift, again.listing)
    assert [(x.instance_key, x.instance_id, x.reason) for x in second] == [
        ("op3-0", live["op3-0"].id, "spot-reclaim"),
        ("op3-1", live["op3-1"].id, MISSING),
    ]
    assert not list(sim.workdir.glob("*.tfplan"))  # the saved refresh plans do not outlive a read

    # Both out of the desired set: the next apply re-creates nothing and the drift is gone.
    doc = json.loads((sim.workdir / DESIRED).read_text())
    for key in ("op3-0", "op3-1"):
        del doc["instances"][key]
    (sim.workdir / DESIRED).write_text(json.dumps(doc))
    result = sim.engine.apply(sim.workdir, var_files=[Path(DESIRED)])
    assert result.summary.add == 0
    assert read_drift(sim.engine, sim.workdir).deleted == {}
    assert [i.client_token for i in sim.store.list_instances({"xce:cluster": CLUSTER})] == ["op3-2"]


def test_a_cloud_that_cannot_be_read_raises(sim: Provider) -> None:
    with pytest.raises(TerraformError, match="no desired set"):
        read_drift(sim.engine, sim.workdir)
    write_desired(sim, 1)
    sim.engine.apply(sim.workdir, var_files=[Path(DESIRED)])
    sim.store.set_error_rate(1.0)  # every API call fails: the refresh cannot read the cloud
    try:
        with pytest.raises(TerraformError, match="simulated API failure"):
            read_listing(sim.engine, sim.workdir, AS_IS)
    finally:
        sim.store.clear_faults()
    assert not list(sim.workdir.glob("*.tfplan"))
