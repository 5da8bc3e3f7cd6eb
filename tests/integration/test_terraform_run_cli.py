"""`xceprov terraform run`: Terraform in one provider's working directory, after a real apply on
the simulated cloud; read-only commands at any time, state surgery only holding the lease."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_run import xceprov

from orchestrator.ops.fence import StandaloneFence

pytestmark = pytest.mark.integration

# Standalone (no controller): the lease of a state-changing command is the provider's local lock.
SITE = """
cluster: tfrun
state_dir: state
standalone: true
controller: {ca: system}
providers: {sim: {module: xcesim, max_instances: 20, shard_size: 2}}
templates: {cpu: {providers: {sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}}}}
"""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site whose provider ``sim`` holds three instances over two shards."""
    where = tmp_path_factory.mktemp("tfrun")
    (where / "xceprov.yaml").write_text(SITE)
    for args in (("plan", "cpu=3", "--out", "burst"), ("apply", "burst")):
        done = xceprov(where, *args)
        assert done.returncode == 0, done.stderr
    return where


def _addresses(site: Path, *shard: str) -> list[str]:
    done = xceprov(site, "terraform", "run", *shard, "sim", "state", "list")
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if ".xcesim_instance.this[" in line]


def test_state_list_and_show_of_each_shard(site: Path) -> None:
    first, second = _addresses(site), _addresses(site, "--shard", "1")
    assert len(first) == 2 and len(second) == 1, (first, second)
    done = xceprov(site, "terraform", "run", "--shard", "1", "sim", "state", "show", second[0])
    assert done.returncode == 0, done.stderr
    assert "c8.large" in done.stdout and "debian-12" in done.stdout


def test_show_json_validate_and_fmt(site: Path) -> None:
    shown = xceprov(site, "terraform", "run", "sim", "show", "-json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["values"]["outputs"]["instances"]["value"]
    valid = xceprov(site, "terraform", "run", "sim", "validate", "-json")
    assert valid.returncode == 0, valid.stderr
    assert json.loads(valid.stdout)["valid"] is True
    fmt = xceprov(site, "terraform", "run", "sim", "fmt")
    assert (fmt.returncode, fmt.stdout, fmt.stderr) == (0, "", "")
    output = xceprov(site, "terraform", "run", "--shard", "1", "sim", "output", "-json")
    assert output.returncode == 0, output.stderr
    assert len(json.loads(output.stdout)["instances"]["value"]) == 1
    version = xceprov(site, "terraform", "run", "sim", "version")
    assert version.returncode == 0 and version.stdout.startswith("Terraform v"), version


def test_fmt_never_writes_and_reports_with_exit_4(site: Path) -> None:
    workdir = site / "state" / "work" / "tfrun" / "sim"
    main = workdir / "main.tf"
    before = main.read_text()
    main.write_text(before.replace("\n", "\n   ", 1))  # one badly indented line
    try:
        done = xceprov(site, "terraform", "run", "sim", "fmt")
        assert done.returncode == 4, done.stderr
        assert "main.tf" in done.stdout  # -diff shows what would change
        assert done.stderr.strip().splitlines()[-1] == (f"xceprov: terraform fmt in {workdir} exited with code 3")
        assert main.read_text() != before  # checked, never rewritten
    finally:
        main.write_text(before)


def test_a_mutating_command_is_refused_in_one_line(site: Path) -> None:
    for args, says in (
        (("apply", "-auto-approve"), "terraform apply: not run by xceprov terraform run; read-only: state list"),
        (("import", "x.y", "i-1"), "terraform import x.y: not run by xceprov terraform run"),
        (("state", "rm", "x.y"), "terraform state rm changes the provider's state: add --hold-lease"),
        (("taint", "x.y"), "terraform taint changes the provider's state: add --hold-lease"),
        (("state", "list", "-chdir=/"), "-chdir=/ is not allowed"),
        (("fmt", "-write=true"), "-write=true is not allowed"),
    ):
        done = xceprov(site, "terraform", "run", "sim", *args)
        assert done.returncode == 2, (args, done.stderr)
        [line] = done.stderr.strip().splitlines()
        assert says in line, line
    assert len(_addresses(site)) == 2


def test_unknown_provider_and_shard_exit_2(site: Path) -> None:
    done = xceprov(site, "terraform", "run", "aws", "state", "list")
    assert done.returncode == 2
    assert done.stderr.strip() == f"xceprov: unknown provider 'aws' (configured in {site / 'xceprov.yaml'}: sim)"
    done = xceprov(site, "terraform", "run", "--shard", "7", "sim", "state", "list")
    assert done.returncode == 2
    assert done.stderr.strip() == "xceprov: provider sim has no shard 7 (its shards: 0, 1)"


def test_state_rm_holds_the_lease_and_is_refused_while_another_holds_it(site: Path) -> None:
    [address] = _addresses(site, "--shard", "1")
    # Another holder of the provider's local lock (a daemon, another command).
    with StandaloneFence(site / "state" / "locks", ["sim"]):
        done = xceprov(site, "terraform", "run", "--shard", "1", "--hold-lease", "sim", "state", "rm", address)
        # Reading needs no lease: it runs beside the holder.
        assert _addresses(site, "--shard", "1") == [address]
    assert done.returncode == 9, done.stderr
    assert "the standalone lock" in done.stderr and "is held by" in done.stderr
    assert _addresses(site, "--shard", "1") == [address]
    done = xceprov(site, "terraform", "run", "--shard", "1", "--hold-lease", "sim", "state", "rm", address)
    assert done.returncode == 0, done.stderr
    assert _addresses(site, "--shard", "1") == []
    audit = [json.loads(line) for line in (site / "state" / "audit.log").read_text().splitlines()]
    [entry] = [e for e in audit if e["action"] == "terraform-run"]
    assert (entry["provider"], entry["shard"], entry["args"], entry["returncode"]) == (
        "sim",
        1,
        ["state", "rm", address],
        0,
    )


def test_a_pg_sites_connection_string_appears_in_no_output(tmp_path: Path) -> None:
    """With ``terraform.backend: pg`` the commands run against the shard's schema with the
    connection string in the environment only; neither it nor a password reaches any output,
    even when Terraform fails on it."""
    import os
    import subprocess
    import sys

    from pg_server import pg_server

    site = tmp_path / "site"
    site.mkdir()
    (site / "xceprov.yaml").write_text(
        SITE.replace("cluster: tfrun", "cluster: tfpg").replace(
            "standalone: true", "standalone: true\nterraform: {backend: pg}"
        )
    )

    def run(conn_str: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "XCEPROV_CONFIG": str(site / "xceprov.yaml"), "PG_CONN_STR": conn_str}
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", *args],
            cwd=site, env=env, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    with pg_server() as pg:
        # A password the server (trust, socket only) ignores, but the toolkit must hide.
        conn_str = pg.conn_str + "&password=hunter2-pw"
        for args in (("plan", "cpu=3", "--out", "burst"), ("apply", "burst")):
            done = run(conn_str, *args)
            assert done.returncode == 0, done.stderr
        outputs = []
        for args in (("state", "list"), ("show", "-json"), ("validate",), ("providers",)):
            done = run(conn_str, "terraform", "run", "--shard", "1", "sim", *args)
            assert done.returncode == 0, (args, done.stderr)
            outputs += [done.stdout, done.stderr]
        assert ".xcesim_instance.this[" in outputs[0]
        assert all(conn_str not in out and "hunter2-pw" not in out for out in outputs)
        # A database that cannot be reached: one line, exit 75 (retry later), no password.
        wrong = "postgresql://xce:hunter2-pw@127.0.0.1:1/xceprov?connect_timeout=2"
        done = run(wrong, "terraform", "run", "sim", "state", "list")
        assert done.returncode == 75, done.stderr
        [line] = done.stderr.strip().splitlines()
        assert line.startswith("xceprov: shared store: connect failed") and "hunter2-pw" not in line


def test_with_a_controller_hold_lease_takes_the_providers_lease(tmp_path: Path) -> None:
    """Not standalone: ``--hold-lease`` is the controller's lease of the provider; another
    holder refuses it (exit 9, naming the holder) and reading goes on beside it."""
    import os

    from sim_world_helpers import sim_world

    from orchestrator.clients.controller.types import LeaseGrant

    with sim_world(tmp_path / "site", f"trc{os.getpid()}") as world:
        world.ok("apply", str(world.bundle("two", "cpu=2")))

        def listed() -> list[str]:
            return [ln for ln in world.ok("terraform", "run", "sim", "state", "list").splitlines() if ".this[" in ln]

        first, second = listed()
        with world._link() as link:  # another orchestrator holding the provider's lease
            link.open()
            grant = link.acquire("sim")
            assert isinstance(grant, LeaseGrant)
            done = world.xceprov("terraform", "run", "--hold-lease", "sim", "state", "rm", first)
            assert done.returncode == 9, done.stderr
            assert "test-reader" in done.stderr
            assert listed() == [first, second]
            link.release("sim", grant.epoch)
        world.ok("terraform", "run", "--hold-lease", "sim", "state", "rm", first)
        assert listed() == [second]
        assert "terraform-run" in world.actions()
