"""A SIGTERM during a bootstrap of real simulated hosts stops the play too (docs/daemon.md, "Stopping").

The world has the simulated hosts (root, pycapnp for the node manager). A site pre-bootstrap hook
of many short steps keeps the play running longer than ``daemon.stop_timeout``; the SIGTERM comes
while it runs. The daemon must exit 0 within the bound with no ``ansible-playbook`` left, record
the hosts as not bootstrapped, and a restarted daemon bootstraps every host, which then joins.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

import pytest
import yaml
from play_processes import playbooks_with
from sim_labs import claim_test_lab
from sim_world_helpers import SimWorld, sim_world, wait_until

from orchestrator.sim.hosts import lab as labnet
from tests.integration.test_daemon import STOP_TIMEOUT, configure, leased, running_daemon

pytestmark = [pytest.mark.integration, pytest.mark.root]

STEPS = 60  # one second each: the play outlasts daemon.stop_timeout by far


def _can_run_hosts() -> bool:
    try:
        import capnp  # noqa: F401  (the simulated node manager bundles pycapnp)
    except ImportError:
        return False
    return os.geteuid() == 0


def _slow_hook(site: Path) -> Path:
    """A site directory whose pre-bootstrap hook takes STEPS seconds while ``<site>/slow`` exists."""
    hooks = site / "hooks"
    hooks.mkdir()
    slow = site / "slow"
    steps = [
        {"name": f"Slow step {n}", "ansible.builtin.command": "sleep 1", "when": f"'{slow}' is exists"}
        for n in range(1, STEPS + 1)
    ]
    play = [{"name": "The test's slow site hook", "hosts": "all", "gather_facts": False, "tasks": steps}]
    (hooks / "pre-bootstrap.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    slow.touch()
    return hooks


def _play_output(world: SimWorld) -> str:
    """The newest bootstrap run's stdout (ansible-runner's artifacts, as an operator reads them)."""
    runs = sorted((world.state / "ansible" / "artifacts").glob("*-bootstrap-*/stdout"))
    return runs[-1].read_text(errors="replace") if runs else ""


def test_sigterm_mid_bootstrap_stops_the_play_and_a_restart_bootstraps_every_host(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if not _can_run_hosts():
        pytest.skip("simulated hosts need root and pycapnp (the node manager artifact)")
    lab = claim_test_lab(f"{os.getpid()}/{request.node.nodeid}")
    try:
        with sim_world(tmp_path / "site", f"dbs-{secrets.token_hex(3)}", lab) as world:
            _run(world)
    finally:
        labnet.destroy_lab(lab)


def _run(world: SimWorld) -> None:
    cfg = configure(world)
    cfg["ansible"] = {"timeout": "600s", "site_dir": str(_slow_hook(world.site))}
    cfg["policy"] = {"cooldown": "1s"}
    (world.site / "xceprov.yaml").write_text(yaml.safe_dump(cfg))
    ours = f"XCEPROV_CONFIG={world.site / 'xceprov.yaml'}"  # in the environment of the daemon's plays
    with running_daemon(world, "daemon-1") as first:
        first.wait_status("the daemon's lease of sim", leased)
        world.ok("sim", "submit", "--template", "cpu", "--hosts", "3", "--duration", "600s")
        wait_until(
            "the bootstrap play in its slow hook",
            lambda: "Slow step 3" in _play_output(world) or not first.alive(),
            timeout=240,
        )
        assert playbooks_with(ours), "no play running when the SIGTERM came"
        code, took = first.terminate()
        assert code == 0, first.log()[-6000:]
        assert took < STOP_TIMEOUT, took
    assert playbooks_with(ours) == []
    output = _play_output(world)
    # Stopped between two tasks, long before the hook's end, and the role never ran.
    assert "User interrupted execution" in output and f"Slow step {STEPS}" not in output
    assert "stopped: no work in flight" in first.log()
    records = json.loads((world.state / "bootstrap.json").read_text())["hosts"]
    assert len(records) == 3
    for rec in records.values():
        assert rec["outcome"] == "stopped: not finished: the daemon is stopping", rec
        assert rec["attempts"] == 0 and not rec["gave_up"], rec
    keys = set(world.alive())
    assert len(keys) == 3

    (world.site / "slow").unlink()  # the hook is quick from now on
    with running_daemon(world, "daemon-2") as second:

        def all_done() -> bool:
            # Joined at the controller, and the play's end recorded (the node manager joins
            # before the play's last tasks).
            assert second.alive(), second.log()[-6000:]
            hosts = world.hosts()
            records = json.loads((world.state / "bootstrap.json").read_text())["hosts"]
            joined = all(k in hosts and hosts[k].joined_at > 0 for k in keys)
            return joined and {r["outcome"] for r in records.values()} == {"ok"}

        wait_until("every host bootstrapped and joined", all_done, timeout=300)
        code, _took = second.terminate()
        assert code == 0, second.log()[-6000:]
    records = json.loads((world.state / "bootstrap.json").read_text())["hosts"]
    assert {r["outcome"] for r in records.values()} == {"ok"}, records
    assert all(r["attempts"] == 1 for r in records.values()), records
    assert set(world.alive()) == keys  # the same hosts: none was returned or replaced
