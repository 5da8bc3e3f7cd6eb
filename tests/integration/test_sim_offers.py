"""Offerings in the simulated cloud through real Terraform and the xcesim module (issue 31).

An instance's ``zone`` and ``subnet`` travel from the desired set through the contract's
``instances`` variable and the module to the cloud; a capacity limit of one flavor in one zone
refuses the rest of a create, Terraform names each refused instance in its diagnostics
(``module.instances.xcesim_instance.this["<key>"]``) and the typed refusal says which keys met
which class; the cloud's request journal counts every attempt, refused ones included.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import xceprov

from orchestrator.clients.terraform.messages import ApplyFailed
from orchestrator.configfile import load_config
from orchestrator.errors import CapacityRefused
from orchestrator.ops.refusal import refusal
from orchestrator.sim.cloud.requestlog import create_attempts
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.workspace.terraform import engine_for, prepared_workdir
from orchestrator.workspace.workdir import ProviderWorkdir

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

# No controller: apply runs standalone (local lock, epoch none).
SITE = """
cluster: itest
state_dir: state
standalone: true
controller: {ca: system}
providers: {sim: {module: xcesim, max_instances: 20}}
templates: {cpu: {providers: {sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}}}}
"""


def test_zone_and_subnet_reach_the_cloud_and_refused_keys_are_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "xceprov.yaml").write_text(SITE)
    # No room for the flavor at all: the whole op is refused, its desired set recorded.
    assert xceprov(tmp_path, "sim", "fault", "capacity", "c8.large", "0").returncode == 0
    assert xceprov(tmp_path, "plan", "cpu=3", "--out", "b").returncode == 0
    done = xceprov(tmp_path, "apply", "b")
    assert done.returncode == 4 and "InsufficientCapacity: flavor c8.large has no capacity" in done.stderr

    # Room for one c8.large in zone b only; each instance of the desired set placed in zone b
    # (what the offering's rendering writes; set here so this test needs only the cloud side).
    monkeypatch.chdir(tmp_path)
    config = load_config(str(tmp_path / "xceprov.yaml")).config
    store = CloudStore(config.sim_state_dir() / "cloud.sqlite")
    store.set_capacity("c8.large", None)
    fault = xceprov(tmp_path, "sim", "fault", "capacity", "c8.large", "1", "--zone", "b")
    assert fault.returncode == 0 and "c8.large@b=1" in fault.stdout
    engine = engine_for(config)
    workdir = ProviderWorkdir(config, "sim", ROOT)
    prepared_workdir(engine, workdir)
    desired = json.loads(workdir.desired_file.read_text())
    keys = sorted(desired["instances"])
    for entry in desired["instances"].values():
        entry.update(zone="b", subnet="s1")
    workdir.desired_file.write_text(json.dumps(desired))

    with pytest.raises(ApplyFailed) as caught:
        engine.apply(workdir.path, var_files=[workdir.desired_file])
    [made] = store.list_instances()
    assert (made.zone, made.subnet) == ("b", "s1") and made.client_token in keys
    typed = refusal("xcesim", caught.value)
    assert isinstance(typed, CapacityRefused)
    assert dict(typed.refused) == {key: "capacity" for key in keys if key != made.client_token}
    assert "flavor c8.large in zone b has no capacity (limit 1)" in str(typed)

    # The cloud's own journal: 3 refused without a zone, then 1 created and 2 refused in zone b.
    requests = store.requests()
    assert create_attempts(requests, provider="sim") == {"c8.large": 3, "c8.large@b@s1": 3}
    assert sorted(r.outcome for r in requests if r.zone == "b") == ["capacity", "capacity", "created"]
    listed = json.loads(xceprov(tmp_path, "sim", "cloud", "list", "--json").stdout)["instances"]
    assert [(i["zone"], i["subnet"]) for i in listed] == [("b", "s1")]
