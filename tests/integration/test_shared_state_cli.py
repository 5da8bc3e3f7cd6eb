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
from cli_run import resume_when_admitted, xceprov

from orchestrator.clients.postgres import SharedStore
from orchestrator.configfile import ENV_VAR, load_config
from orchestrator.model.facts import Epoch, FactKind
from orchestrator.ops.facts import standalone_facts
from orchestrator.ops.fence import standalone_fence
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.workspace.sharedstore import store_for
from tests.pg_server import PgServer, standalone_site

pytestmark = pytest.mark.integration


def instance(tmp_path: Path, name: str, cluster: str) -> Path:
    """One orchestrator's site directory (its own state directory) over the test's one cloud."""
    site = tmp_path / name
    site.mkdir()
    (site / "xceprov.yaml").write_text(standalone_site(cluster, shard_size=2, store=tmp_path / "cloud.sqlite"))
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
    # Another machine's standalone command holds the provider (its lease row in the database).
    with standalone_fence(load_config(holder / "xceprov.yaml").config, ["sim"]) as held:
        refused = xceprov(other, "apply", "one")
        assert refused.returncode == 9, refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert f"provider sim: held by {held.holder}" in line
        assert "Traceback" not in refused.stderr
        assert cloud.list_instances({"xce:cluster": "fenced"}) == []
    # Its lock released, the same command goes through.
    applied = xceprov(other, "apply", "one")
    assert applied.returncode == 0, applied.stderr
    assert len(cloud.list_instances({"xce:cluster": "fenced"})) == 1


def test_a_killed_standalone_command_is_resumed_by_another_instance(tmp_path: Path, conn_str: str) -> None:
    """``kill -9`` mid-apply on one machine: once its lease row has run out, and the grace after it,
    another machine's ``ops resume`` finishes the op from the shared facts, desired sets and states."""
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
    # Its lease row outlives it: another command is admitted once its lease and the grace after it
    # have run out (its Terraform, interrupted, may still be finishing a call until then).
    refused = xceprov(second, "ops", "resume")
    assert refused.returncode == 9, refused.stderr
    assert f"held by standalone command {proc.pid}@" in refused.stderr
    resumed = resume_when_admitted(second)
    assert resumed.returncode == 0, resumed.stderr
    assert ops(second)["open"] == []

    facts = standalone_facts(load_config(second / "xceprov.yaml").config).facts("sim")
    created = [f.instance_key for f in facts if f.kind == FactKind.INSTANCE_CREATED]
    alive = {i.client_token: i.id for i in cloud.list_instances({"xce:cluster": "resumed"})}
    assert len(created) == len(set(created)) == 2 and set(created) == set(alive)
    every = cloud.list_instances({"xce:cluster": "resumed"}, include_terminated=True)
    assert len(every) == 2  # nothing created twice


def started_apply(site: Path, bundle: str) -> subprocess.Popen[str]:
    """``xceprov apply BUNDLE`` of ``site`` in the background, returned once its apply runs."""
    env = {**os.environ, ENV_VAR: str(site / "xceprov.yaml")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "apply", bundle],
        cwd=site,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    audit = site / "state" / "audit.log"
    deadline = time.monotonic() + 120
    while '"op-apply"' not in (audit.read_text() if audit.exists() else ""):
        assert proc.poll() is None, f"ended before its apply: {proc.communicate()}"
        assert time.monotonic() < deadline, "the apply never started"
        time.sleep(0.05)
    return proc


def test_a_database_restart_mid_apply_admits_no_second_standalone_command(
    tmp_path: Path, conn_str: str, server: PgServer
) -> None:
    """Issue 27 item 5: the advisory lock died with the server's session, and another machine's
    ``ops resume`` applied the first one's open op while that apply still ran."""
    first, second = instance(tmp_path, "a", "restart"), instance(tmp_path, "b", "restart")
    cloud = CloudStore(tmp_path / "cloud.sqlite")
    assert xceprov(first, "plan", "cpu=2", "--out", "burst").returncode == 0
    cloud.set_slow_launch(30.0)  # the apply outlasts the restart and the second command by far
    proc = started_apply(first, "burst")
    try:
        server.stop()
        server.start()
        refused = xceprov(second, "ops", "resume")
        still_running = proc.poll() is None
    finally:
        cloud.set_slow_launch(0.0)
    assert refused.returncode == 9, refused.stderr
    [line] = refused.stderr.strip().splitlines()
    assert f"provider sim: held by standalone command {proc.pid}@" in line
    assert still_running, "the first apply ended before the second command was refused: nothing was shown"
    proc.communicate(timeout=300)
    # Whatever the first command's end (the restart may have failed one of its writes), the op is
    # completed once, and nothing was created twice.
    resumed = resume_when_admitted(second)
    assert resumed.returncode == 0, resumed.stderr
    assert ops(second)["open"] == []
    every = cloud.list_instances({"xce:cluster": "restart"}, include_terminated=True)
    assert len(every) == 2 and all(i.state != "terminated" for i in every)


def test_a_standalone_command_beside_a_live_daemon_is_refused_naming_it(tmp_path: Path, conn_str: str) -> None:
    """Issue 27 item 6: an operator who cannot reach the controller sets ``standalone: true``
    beside a daemon of the cluster: nothing is created and the daemon's state is not touched."""
    site = instance(tmp_path, "a", "beside")
    cloud = CloudStore(tmp_path / "cloud.sqlite")
    assert xceprov(site, "plan", "cpu=1", "--out", "one").returncode == 0
    daemon = SharedStore.open(conn_str, "beside")
    try:
        daemon.heartbeat("inst-1", "beside-daemon-node1", ["sim"], {"sim": "5.3"}, live_for=10)
        daemon.write_document("sim", "lost-suspects/0", b"{}", Epoch(5, 3))  # written under its lease
        refused = xceprov(site, "apply", "one")
        assert refused.returncode == 9, refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert "provider sim: held by daemon beside-daemon-node1 (inst-1)" in line and "epoch 5.3" in line
        refused = xceprov(site, "ops", "hand-over", "sim")  # never while a daemon holds it
        assert refused.returncode == 9 and "held by daemon beside-daemon-node1" in refused.stderr, refused.stderr
        assert cloud.list_instances({"xce:cluster": "beside"}) == []
        assert daemon.read_documents("sim", "desired/") == {}

        # Its member row gone (a clean stop), the fence it wrote under the controller's epoch still
        # says the provider is the controller's.
        daemon.leave("inst-1")
        refused = xceprov(site, "apply", "one")
        assert refused.returncode == 9, refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert "held by the controller's lease holder" in line and "epoch 5.3" in line
        assert "xceprov ops hand-over sim" in line
        assert cloud.list_instances({"xce:cluster": "beside"}) == []

        # The controller is gone for good: the operator hands the provider over, audited.
        handed = xceprov(site, "ops", "hand-over", "sim")
        assert handed.returncode == 0, handed.stderr
        said = "sim: handed over: the controller's epoch 5.3 refuses standalone commands no more"
        assert handed.stdout.strip() == said
        assert '"standalone-hand-over"' in (site / "state" / "audit.log").read_text()
        applied = xceprov(site, "apply", "one")
        assert applied.returncode == 0, applied.stderr
        assert len(cloud.list_instances({"xce:cluster": "beside"})) == 1
    finally:
        daemon.close()
