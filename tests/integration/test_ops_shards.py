"""A burst over several Terraform states: real bundled Terraform, the simulated cloud, standalone.

With ``shard_size: 3`` a burst of 7 lands in three states (3 + 3 + 1); the cloud then holds
exactly those 7 instances, each with its instance key as client token; only shard 0 lists the
cluster's tagged objects; ``destroy --all`` reads every shard and removes all 7. No controller
runs: standalone mode (local lock, epoch ``none``), as in ``test_plan_cli.py``. All three
shards at once (``parallel_states: 3``) keeps the test short; the bound itself is a unit test
(``tests/unit/ops/test_executor_shards.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import xceprov

from orchestrator.configfile import load_config
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.workspace.cloudview import read_views
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.terraform import engine_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

SITE = """
cluster: shardtest
state_dir: state
standalone: true
controller: {ca: system}
terraform: {parallel_states: 3}
providers:
  sim:
    module: xcesim
    max_instances: 20
    shard_size: 3
templates:
  cpu:
    providers:
      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}
"""


def test_a_burst_over_three_states_lists_once_and_destroys_whole(tmp_path: Path) -> None:
    site = tmp_path
    (site / "xceprov.yaml").write_text(SITE)
    store = CloudStore(site / "state" / "sim" / "cloud.sqlite")
    planned = xceprov(site, "plan", "cpu=7", "--out", "burst")
    assert planned.returncode == 0, planned.stderr
    applied = xceprov(site, "apply", "burst")
    assert applied.returncode == 0, applied.stderr

    loaded = load_config(site / "xceprov.yaml")
    shards = ProviderShards(loaded.config, "sim", ROOT)
    states = shards.all()
    held = [sorted(shards.keys(s)) for s in states]
    assert [len(k) for k in held] == [3, 3, 1]
    assert all((s.path / "terraform.tfstate").is_file() for s in states)
    keys = {k for part in held for k in part}
    alive = store.list_instances({"xce:cluster": "shardtest"})
    assert sorted(i.client_token for i in alive) == sorted(keys)
    assert {i.tags["xce:epoch"] for i in alive} == {"none"}

    # Only shard 0 reads the tagged listing (a refresh sees all 7); the others leave it out of
    # their states and say so in their outputs.
    engine = engine_for(loaded.config)
    listing = read_views(engine, states[0].path, states[0].labels).listing
    assert listing.supported
    assert sorted(o.id for o in listing.objects) == sorted(i.id for i in alive)
    for shard in states[1:]:
        outputs = engine.output(shard.path)
        assert outputs["tagged"] == {} and outputs["tagged_supported"] is False
        assert sorted(outputs["instances"]) == sorted(shards.keys(shard))

    gone = xceprov(site, "destroy", "--all")
    assert gone.returncode == 0, gone.stderr
    assert store.list_instances({"xce:cluster": "shardtest"}) == []
    assert [len(shards.keys(s)) for s in shards.all()] == [0, 0, 0]
