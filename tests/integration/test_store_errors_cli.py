"""How the command line answers a shared store it cannot use: a refused option, a newer schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import xceprov

from orchestrator.clients.postgres import SharedStore
from orchestrator.clients.postgres.migrations import LATEST
from tests.unit.clients.postgres.pg_helpers import sql

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
    max_instances: 4
templates:
  cpu:
    providers:
      sim: {{flavor: c8.large, image: debian-12, cost_per_hour: 0.5}}
"""


def site(tmp_path: Path, cluster: str) -> Path:
    path = tmp_path / "site"
    path.mkdir()
    (path / "xceprov.yaml").write_text(SITE.format(cluster=cluster))
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
