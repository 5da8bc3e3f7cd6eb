"""``terraform.backend: pg`` end to end through the command line, standalone, on the simulated cloud.

Two instances are two site directories of one cluster, each with a state directory of its own,
over one simulated cloud and one throw-away PostgreSQL server (tests/pg_server.py, one per
module, a fresh database per test). What one instance applied, the other sees and acts on with
nothing local: Terraform's states (Terraform's own pg backend), the desired sets and the
standalone fact journal are in the database; a working directory is a cache that is rebuilt.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_run import xceprov

from orchestrator.configfile import ENV_VAR, load_config
from orchestrator.model.facts import FactKind
from orchestrator.ops.facts import standalone_facts
from orchestrator.ops.fence import standalone_fence
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.workspace.sharedstore import store_for

pytestmark = pytest.mark.integration

SITE = """
cluster: {cluster}
state_dir: state
standalone: true
controller: {{ca: system}}
terraform: {{backend: pg}}
providers:
  sim:
    module: xcesim
    max_instances: 20
    shard_size: 2
    settings: {{store: {store}}}
templates:
  cpu:
    providers:
      sim: {{flavor: c8.large, image: debian-12, cost_per_hour: 0.5}}
"""


def instance(tmp_path: Path, name: str, cluster: str) -> Path:
    """One orchestrator's site directory (its own state directory) over the test's one cloud."""
    site = tmp_path / name
    site.mkdir()
    (site / "xceprov.yaml").write_text(SITE.format(cluster=cluster, store=tmp_path / "cloud.sqlite"))
    return site


def ops(site: Path) -> dict[str, object]:
    done = xceprov(site, "ops", "--json")
    assert done.returncode == 0, done.stderr
    [provider] = json.loads(done.stdout)["providers"]
    assert isinstance(provider, dict)
    return provider


def planned(site: Path, *args: str) -> dict[str, object]:
    done = xceprov(site, "plan", *args, "--json")
    assert done.returncode == 0, done.stderr
    [provider] = json.loads(done.stdout)["providers"]
    assert isinstance(provider, dict)
    return provider


def test_a_second_instance_sees_and_acts_on_everything_with_nothing_local(tmp_path: Path, conn_str: str) -> None:
    first, second = instance(tmp_path, "a", "takeover"), instance(tmp_path, "b", "takeover")
    cloud = CloudStore(tmp_path / "cloud.sqlite")
    assert xceprov(first, "plan", "cpu=3", "--out", "burst").returncode == 0
    applied = xceprov(first, "apply", "burst")
    assert applied.returncode == 0, applied.stderr
    made = sorted(i.client_token for i in cloud.list_instances({"xce:cluster": "takeover"}))
    assert len(made) == 3

    # The second instance has never run: its ops come from the shared fact journal (the keys are
    # tracked, the op complete), its desired sets and states from the database.
    seen = ops(second)
    assert (seen["open"], seen["untracked"], seen["listing"]) == ([], [], "read")
    preview = planned(second, "cpu=1")
    assert (preview["add"], preview["change"], preview["destroy"]) == (1, 0, 0)

    # The first instance loses its working directories: they are rebuilt from the database.
    work = first / "state" / "work" / "takeover" / "sim"
    recorded = store_for(load_config(first / "xceprov.yaml").config)
    assert recorded is not None
    shard0 = recorded.read_document("sim", "desired/0")
    shutil.rmtree(first / "state" / "work")
    preview = planned(first, "cpu=1")
    assert (preview["add"], preview["change"], preview["destroy"]) == (1, 0, 0)
    assert (work / "desired.tfvars.json").read_bytes() == shard0
    assert ops(first)["untracked"] == []

    # And the second one returns everything the first made.
    gone = xceprov(second, "destroy", "--all")
    assert gone.returncode == 0, gone.stderr
    assert cloud.list_instances({"xce:cluster": "takeover"}) == []
    assert recorded.read_document("sim", "desired/0") is not None
    assert all(b'"instances": {}' in body for body in recorded.read_documents("sim", "desired/").values())


def test_a_second_standalone_command_on_the_provider_is_refused(tmp_path: Path, conn_str: str) -> None:
    holder, other = instance(tmp_path, "a", "fenced"), instance(tmp_path, "b", "fenced")
    cloud = CloudStore(tmp_path / "cloud.sqlite")
    # A report-only scan of a provider never used lists its cloud and writes nothing shared.
    scanned = xceprov(other, "orphans", "--json")
    assert scanned.returncode == 0, scanned.stderr
    [read] = json.loads(scanned.stdout)["providers"]
    assert read["cloud"]["listing"] == "read"
    store = store_for(load_config(other / "xceprov.yaml").config)
    assert store is not None and store.read_documents("sim", "") == {}
    assert xceprov(other, "plan", "cpu=1", "--out", "one").returncode == 0
    # Another machine's standalone command holds the provider (the advisory lock in the database).
    with standalone_fence(load_config(holder / "xceprov.yaml").config, ["sim"]):
        refused = xceprov(other, "apply", "one")
        assert refused.returncode == 9, refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert "provider sim: the standalone lock is held by another standalone command" in line
        assert "Traceback" not in refused.stderr
        assert cloud.list_instances({"xce:cluster": "fenced"}) == []
    # Its lock released, the same command goes through.
    applied = xceprov(other, "apply", "one")
    assert applied.returncode == 0, applied.stderr
    assert len(cloud.list_instances({"xce:cluster": "fenced"})) == 1


def test_a_killed_standalone_command_is_resumed_by_another_instance(tmp_path: Path, conn_str: str) -> None:
    """``kill -9`` mid-apply on one machine: its advisory lock dies with its connection, and another
    machine's ``ops resume`` finishes the op from the shared facts, desired sets and states."""
    first, second = instance(tmp_path, "a", "resumed"), instance(tmp_path, "b", "resumed")
    cloud = CloudStore(tmp_path / "cloud.sqlite")
    assert xceprov(first, "plan", "cpu=2", "--out", "burst").returncode == 0
    cloud.set_slow_launch(1.5)
    env = {**os.environ, ENV_VAR: str(first / "xceprov.yaml")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "apply", "burst"],
        cwd=first,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    audit = first / "state" / "audit.log"
    deadline = time.monotonic() + 120
    while '"op-apply"' not in (audit.read_text() if audit.exists() else "") and proc.poll() is None:
        assert time.monotonic() < deadline, "the apply never started"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, f"finished before the kill: {stderr}"
    cloud.set_slow_launch(0.0)

    [op] = ops(second)["open"]
    assert isinstance(op, dict) and op["kind"] == "create"
    resumed = xceprov(second, "ops", "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert ops(second)["open"] == []

    facts = standalone_facts(load_config(second / "xceprov.yaml").config).facts("sim")
    created = [f.instance_key for f in facts if f.kind == FactKind.INSTANCE_CREATED]
    alive = {i.client_token: i.id for i in cloud.list_instances({"xce:cluster": "resumed"})}
    assert len(created) == len(set(created)) == 2 and set(created) == set(alive)
    every = cloud.list_instances({"xce:cluster": "resumed"}, include_terminated=True)
    assert len(every) == 2  # nothing created twice
