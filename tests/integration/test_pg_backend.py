"""``terraform.backend: pg``: real bundled Terraform, the simulated cloud, a throw-away PostgreSQL.

One server for the module (tests/pg_server.py). Each test has its own site (standalone: no
controller) and its own cluster name, so its schemas (``<cluster>_<provider>_<n>``) are its own.
The sites run through the command line as a user would, with the connection string in
``PG_CONN_STR`` only; every test also checks the string was written to no file of the site.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from filelock import FileLock
from pg_server import DATABASE, PgServer, pg_server, standalone_site

from orchestrator.clients.ansible.inventory import records_from_workdirs
from orchestrator.configfile import ENV_VAR, load_config
from orchestrator.services.bootstrap import load_records
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.terraform import engine_for
from orchestrator.workspace.tfstates import state_reader

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with pg_server() as server:
        yield server


def write_site(site: Path, cluster: str, backend: str = "pg", extra: str = "") -> Path:
    site.mkdir(parents=True, exist_ok=True)
    (site / "xceprov.yaml").write_text(
        standalone_site(cluster, f"{{parallel_states: 2, backend: {backend}{extra}}}", shard_size=2)
    )
    return site


def cli_env(site: Path, conn_str: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PG_CONN_STR"}
    env[ENV_VAR] = str(site / "xceprov.yaml")
    if conn_str is not None:
        env["PG_CONN_STR"] = conn_str
    return env


def run(site: Path, conn_str: str | None, *args: str) -> subprocess.CompletedProcess[str]:
    """``xceprov ARGS`` in ``site`` with the connection string in ``PG_CONN_STR`` (or none)."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=site,
        env=cli_env(site, conn_str),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def start(site: Path, conn_str: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=site,
        env=cli_env(site, conn_str),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def state_rows(conn_str: str, cluster: str) -> dict[str, dict[str, Any]]:
    """schema → the state document Terraform keeps there, for every schema of ``cluster``."""
    with psycopg.connect(conn_str, autocommit=True) as conn:
        schemas = [
            row[0]
            for row in conn.execute(
                "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE %s ORDER BY 1",
                (f"{cluster}\\_%",),
            )
        ]
        found = {}
        for schema in schemas:
            row = conn.execute(f"SELECT data FROM {schema}.states WHERE name = 'default'").fetchone()
            if row is not None:
                found[schema] = json.loads(row[0])
    return found


def resource_instances(state: Mapping[str, Any]) -> list[str]:
    return sorted(
        str(inst.get("index_key"))
        for res in state.get("resources", [])
        if res.get("type") == "xcesim_instance"
        for inst in res.get("instances", [])
    )


def assert_secret_nowhere(site: Path, conn_str: str, *outputs: str) -> None:
    """The connection string is in no file under the site (state, audit, plans, logs) and no output.

    Saved plans are zip archives (deflated): their members are read one by one.
    """
    needle = conn_str.encode()
    holders = [p for p in site.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]
    plans = [p for p in site.rglob("*.tfplan") if zipfile.is_zipfile(p)]
    for plan in plans:
        with zipfile.ZipFile(plan) as archive:
            holders += [f"{plan}:{name}" for name in archive.namelist() if needle in archive.read(name)]
    assert plans  # every site here saved a plan: the archives were looked into
    assert holders == []
    assert all(conn_str not in out for out in outputs)


def test_no_connection_string_or_a_bad_file_is_one_line_and_exit_3(tmp_path: Path) -> None:
    site = write_site(tmp_path / "site", "pgnone")
    done = run(site, None, "validate")
    assert done.returncode == 3, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("xceprov: terraform.backend: pg needs") and "PG_CONN_STR" in lines[-1]
    assert "Traceback" not in done.stderr
    secret = "postgresql://xce:hunter2-pw@db.example/xceprov"
    conn_file = tmp_path / "pg.conn"
    for content, problem in (("", "empty"), (f"{secret}\n{secret}\n", "more than one line")):
        conn_file.write_text(content)
        write_site(site, "pgnone", extra=f", pg_conn_file: {conn_file}")
        done = run(site, None, "validate")
        assert done.returncode == 3, done.stderr
        assert done.stderr.strip().splitlines()[-1] == f"xceprov: terraform.pg_conn_file: {conn_file}: " + (
            "empty (it must hold the PostgreSQL connection string)"
            if problem == "empty"
            else "more than one line (it must hold the connection string alone, on one line)"
        )
        assert "hunter2" not in done.stderr + done.stdout and "Traceback" not in done.stderr


def test_an_apply_keeps_every_shard_state_as_rows_and_reads_them_back(
    tmp_path: Path, pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = write_site(tmp_path / "site", "pgrows")
    locked = run(site, pg.conn_str, "terraform", "lock")  # the site's provider lock, then inits against it
    assert locked.returncode == 0, locked.stderr
    planned = run(site, pg.conn_str, "plan", "cpu=3", "--out", "burst")
    assert planned.returncode == 0, planned.stderr
    applied = run(site, pg.conn_str, "apply", "burst")
    assert applied.returncode == 0, applied.stderr

    rows = state_rows(pg.conn_str, "pgrows")
    assert sorted(rows) == ["pgrows_sim_0", "pgrows_sim_1"]
    alive = CloudStore(site / "state" / "sim" / "cloud.sqlite").list_instances({"xce:cluster": "pgrows"})
    assert sorted(k for state in rows.values() for k in resource_instances(state)) == sorted(
        i.client_token for i in alive
    )
    assert len(alive) == 3
    # No local state at all (.terraform/terraform.tfstate is Terraform's record of the backend).
    assert [p for p in (site / "state" / "work").rglob("terraform.tfstate*") if ".terraform" not in p.parts] == []

    # What xceprov bootstrap and the inventory plugin read: the rows.
    loaded = load_config(site / "xceprov.yaml")
    with state_reader(pg.conn_str) as read_state:
        records = records_from_workdirs(loaded.config.state_dir, "pgrows", read_state)
    assert sorted(r.instance_id for r in records) == sorted(i.id for i in alive)
    monkeypatch.setenv("PG_CONN_STR", pg.conn_str)
    assert load_records(loaded.config) == records  # xceprov bootstrap's hosts
    assert records_from_workdirs(loaded.config.state_dir, "pgrows") == []  # no local file to read
    inventory = ansible_inventory(site / "state", pg.conn_str)
    assert sorted(inventory["_meta"]["hostvars"]) == sorted(r.name for r in records)
    assert_secret_nowhere(site, pg.conn_str, planned.stdout, planned.stderr, applied.stdout, applied.stderr)


def ansible_inventory(state: Path, conn_str: str) -> dict[str, Any]:
    """``ansible-inventory --list`` with the plugin reading the state directory, as an operator runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "XCEPROV_"))}
    env.update(XCEPROV_STATE_DIR=str(state), ANSIBLE_LOCAL_TEMP=str(state / "tmp"), PG_CONN_STR=conn_str)
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", "inventories/xceprov.yml", "--list"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    return dict(json.loads(out.stdout))


def test_a_second_writer_waits_for_the_state_lock_instead_of_failing(tmp_path: Path, pg: PgServer) -> None:
    site = write_site(tmp_path / "site", "pglock")
    first = run(site, pg.conn_str, "plan", "cpu=1", "--out", "one")
    assert first.returncode == 0, first.stderr
    assert run(site, pg.conn_str, "apply", "one").returncode == 0
    # Another writer holds shard 0's state (the advisory lock Terraform's pg backend takes):
    # this command's plan and apply of that shard must wait for it, then go on.
    with psycopg.connect(pg.conn_str, autocommit=True) as holder:
        (state_id,) = holder.execute("SELECT id FROM pglock_sim_0.states WHERE name = 'default'").fetchone() or (0,)
        holder.execute("SELECT pg_advisory_lock(%s)", (state_id,))
        # The server logs every statement of the sessions opened from now on (the command's).
        holder.execute(f"ALTER DATABASE {DATABASE} SET log_statement = 'all'")
        logged = pg.log.stat().st_size
        second = start(site, pg.conn_str, "plan", "cpu=1", "--out", "two")
        try:
            # The plan asked for the lock and was told no at least once: it is waiting, not failed.
            deadline = time.monotonic() + 120
            while not tried_lock(pg, logged, "pglock_sim_0") and second.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert tried_lock(pg, logged, "pglock_sim_0"), pg.log.read_bytes()[logged:].decode(errors="replace")
            assert second.poll() is None, second.communicate()
        finally:
            holder.execute(f"ALTER DATABASE {DATABASE} RESET log_statement")
            holder.execute("SELECT pg_advisory_unlock(%s)", (state_id,))
        _out, err = second.communicate(timeout=300)
    assert second.returncode == 0, err
    assert run(site, pg.conn_str, "apply", "two").returncode == 0
    alive = CloudStore(site / "state" / "sim" / "cloud.sqlite").list_instances({"xce:cluster": "pglock"})
    assert len(alive) == 2


def tried_lock(pg: PgServer, since: int, schema: str) -> bool:
    """Whether a session asked for the advisory lock of a state in ``schema`` (Terraform's lock
    query) since byte ``since`` of the server's log. Terraform's try lasts a moment and its
    session then runs other statements: ``pg_stat_activity`` polled now and then misses it."""
    lines = pg.log.read_bytes()[since:].decode(errors="replace").splitlines()
    return any("pg_try_advisory_lock" in line and f'"{schema}".' in line for line in lines)


def test_migrate_state_moves_every_local_state_and_recreates_nothing(
    tmp_path: Path, pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = write_site(tmp_path / "site", "pgmove", backend="local")
    assert run(site, None, "plan", "cpu=5", "--out", "burst").returncode == 0
    applied = run(site, None, "apply", "burst")
    assert applied.returncode == 0, applied.stderr
    store = CloudStore(site / "state" / "sim" / "cloud.sqlite")
    before = sorted((i.id, i.client_token) for i in store.list_instances({"xce:cluster": "pgmove"}))
    assert len(before) == 5
    loaded = load_config(site / "xceprov.yaml")
    shards = ProviderShards(loaded.config, "sim", ROOT).all()
    assert [len(ProviderShards(loaded.config, "sim", ROOT).keys(s)) for s in shards] == [2, 2, 1]
    local = {s.index: (s.path / "terraform.tfstate").read_bytes() for s in shards}

    write_site(site, "pgmove", backend="pg")
    refused = run(site, pg.conn_str, "plan", "cpu=1", "--out", "more")
    assert refused.returncode == 3
    assert refused.stderr.strip().count("\n") == 0 and "xceprov terraform migrate-state" in refused.stderr
    checked = run(site, pg.conn_str, "validate")  # the operator's pre-flight names every shard left
    assert checked.returncode == 3
    said = (checked.stdout + checked.stderr).splitlines()
    assert len([ln for ln in said if "xceprov terraform migrate-state" in ln]) == 3, checked.stderr

    # Another holder of the provider (here: a standalone command's lock) is refused first.
    with FileLock(str(site / "state" / "locks" / "standalone-sim.lock"), timeout=0):
        held = run(site, pg.conn_str, "terraform", "migrate-state")
    assert held.returncode == 9 and held.stderr.strip().count("\n") == 0, held.stderr

    dry = run(site, pg.conn_str, "terraform", "migrate-state", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert [line.split(" (")[0] for line in dry.stdout.splitlines()] == [
        f"would move: provider sim shard {n}" for n in (0, 1, 2)
    ]
    assert {s.index: (s.path / "terraform.tfstate").read_bytes() for s in shards} == local  # untouched
    assert state_rows(pg.conn_str, "pgmove") == {}

    moved = run(site, pg.conn_str, "terraform", "migrate-state")
    assert moved.returncode == 0, moved.stderr
    assert len([line for line in moved.stdout.splitlines() if line.startswith("moved: provider sim shard")]) == 3
    for shard in shards:
        assert not (shard.path / "terraform.tfstate").exists()
        assert (shard.path / "terraform.tfstate.migrated").read_bytes() == local[shard.index]  # kept as it was
    rows = state_rows(pg.conn_str, "pgmove")
    assert sorted(rows) == ["pgmove_sim_0", "pgmove_sim_1", "pgmove_sim_2"]
    assert sorted(k for state in rows.values() for k in resource_instances(state)) == sorted(t for _, t in before)

    # The desired sets moved too (the shared store is their record with pg), each one once.
    assert sorted(line for line in moved.stdout.splitlines() if "/desired/" in line) == [
        f"copied: shared store pgmove/sim/desired/{n}" for n in (0, 1, 2)
    ]

    # Nothing to re-create: every shard's plan against its desired set is empty.
    monkeypatch.setenv("PG_CONN_STR", pg.conn_str)  # this process reads the desired sets' rows too
    on_pg = load_config(site / "xceprov.yaml").config
    engine = engine_for(on_pg, {"PG_CONN_STR": pg.conn_str})
    for shard in ProviderShards(on_pg, "sim", ROOT).all():
        plan = engine.plan(shard.path, var_files=[shard.desired_file])
        # (Outputs may differ: shard 0's tagged listing is read afresh; no resource may.)
        assert plan.changes == () and (plan.summary.add, plan.summary.change, plan.summary.remove) == (0, 0, 0)
    assert sorted((i.id, i.client_token) for i in store.list_instances({"xce:cluster": "pgmove"})) == before

    again = run(site, pg.conn_str, "terraform", "migrate-state")
    assert again.returncode == 0 and again.stdout.strip() == (
        "nothing to move: no working directory holds a local Terraform state"
    )
    # And the site works on pg: one more instance, in the shard with room.
    assert run(site, pg.conn_str, "plan", "cpu=1", "--out", "more").returncode == 0
    assert run(site, pg.conn_str, "apply", "more").returncode == 0
    assert len(store.list_instances({"xce:cluster": "pgmove"})) == 6
    audit = (site / "state" / "audit.log").read_text()
    assert audit.count('"terraform-state-migrated"') == 3
    assert_secret_nowhere(site, pg.conn_str, moved.stdout, moved.stderr, dry.stdout, again.stdout)
