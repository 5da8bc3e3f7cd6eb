"""How the command line answers a shared store it cannot use: a database stopped mid-apply, a
refused option, a schema newer than the toolkit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_run import xceprov
from pg_server import PgServer, standalone_site
from sim_controller_helpers import controller_block, controller_process

from orchestrator.clients.postgres import SharedStore
from orchestrator.clients.postgres.migrations import LATEST
from orchestrator.configfile import ENV_VAR
from orchestrator.sim.cloud.store import CloudStore
from tests.unit.clients.postgres.pg_helpers import sql

pytestmark = pytest.mark.integration


def site(tmp_path: Path, cluster: str) -> Path:
    path = tmp_path / "site"
    path.mkdir()
    (path / "xceprov.yaml").write_text(standalone_site(cluster, max_instances=4))
    return path


def test_an_sslmode_libpq_refuses_is_exit_1_not_retry_later(
    tmp_path: Path, conn_str: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    bogus = conn_str.replace("sslmode=disable", "sslmode=bogus")
    assert bogus != conn_str
    monkeypatch.setenv("PG_CONN_STR", bogus)
    done = xceprov(site(tmp_path, "bogus"), "ops")
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert 'invalid sslmode value: "bogus"' in line and bogus not in line and "Traceback" not in done.stderr


def test_validate_refuses_a_schema_newer_than_the_toolkit_as_every_verb_does(tmp_path: Path, conn_str: str) -> None:
    SharedStore.open(conn_str, "newer").close()
    sql(conn_str, "INSERT INTO xceprov.migrations (version, name) VALUES (%s, 'from the future')", (LATEST + 1,))
    path = site(tmp_path, "newer")
    listed = xceprov(path, "ops")
    assert listed.returncode == 1 and f"version {LATEST + 1}" in listed.stderr
    checked = xceprov(path, "validate")
    assert checked.returncode == 3, checked.stdout + checked.stderr
    assert f"version {LATEST + 1}" in checked.stderr and "upgrade the toolkit" in checked.stderr
    assert sql(conn_str, "SELECT max(version) FROM xceprov.migrations") == [(LATEST + 1,)]


def test_the_database_stopped_mid_apply_is_exit_75_with_the_toolkits_advice(
    tmp_path: Path, server: PgServer, conn_str: str
) -> None:
    """With a controller's lease the fence holds while the database is away: Terraform itself
    fails to write its state, and that is the store's outage (75), not a Terraform error (4)."""
    with controller_process(tmp_path, ttl=30, heartbeat=30) as (ctl_state, address, _proc):
        path = tmp_path / "site"
        path.mkdir()
        site_doc = {
            "cluster": "away",
            "state_dir": "state",
            "terraform": {"backend": "pg", "parallelism": 1},  # one create at a time
            "controller": controller_block(ctl_state, address, "orch"),
            "providers": {"sim": {"module": "xcesim", "max_instances": 20}},
            "templates": {"cpu": {"providers": {"sim": {"flavor": "c8.large", "image": "debian-12"}}}},
        }
        (path / "xceprov.yaml").write_text(json.dumps(site_doc))
        planned = xceprov(path, "plan", "cpu=2", "--out", "burst")
        assert planned.returncode == 0, planned.stderr
        cloud = CloudStore(path / "state" / "sim" / "cloud.sqlite")
        cloud.set_slow_launch(8)
        proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", "apply", "burst"],
            cwd=path,
            env={**os.environ, ENV_VAR: str(path / "xceprov.yaml")},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            # The first instance is in Terraform's state, the second one is being created.
            while len(cloud.list_instances({"xce:cluster": "away"})) < 1:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the first create never happened"
                time.sleep(0.05)
            server.stop()
            _, stderr = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
            if not server.running:
                server.start()
        assert proc.returncode == 75, stderr
        [line] = [ln for ln in stderr.splitlines() if ln.startswith("xceprov:")]
        assert "force-unlock" not in stderr and conn_str not in stderr
        assert "cannot be reached" in line and "errored.tfstate" in line and "xceprov ops resume" in line

        cloud.set_slow_launch(0)
        resumed = xceprov(path, "ops", "resume")
        assert resumed.returncode == 0, resumed.stderr
        assert not (path / "state" / "work" / "away" / "sim" / "errored.tfstate").exists()
        assert len(cloud.list_instances({"xce:cluster": "away"}, include_terminated=True)) == 2
