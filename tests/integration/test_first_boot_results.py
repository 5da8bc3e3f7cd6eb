"""First-boot results without SSH, in the simulated world: a failed boot's console line reaches
the status file, ``xceprov status``, the metrics and the audit, and the host is returned; a host
that started and never joins is returned at its join deadline.

The controller is a real process and the cloud the xcesim module behind real Terraform; the
consoles are read through the simulated cloud's console reader the command line binds
(``cli.bootstrap.simulated_world``). No host boots here (no namespaces, no root): the console
text of a failed and of a started first boot is planted where the simulated cloud serves it
from (``<sim_state_dir>/hosts/<id>/boot.{json,log}``, what the host manager writes). Printing
the line from a real boot is the boot hook's (the role's bake mode, ``per-boot`` scripts).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from reconcile_world import World, agree, reconcile_world

from orchestrator.cli.bootstrap import simulated_world
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.passfigures import PassFigures
from orchestrator.daemon.statusdoc import build_document, update_metrics
from orchestrator.model.bootresult import MARKER
from orchestrator.model.config import Config
from orchestrator.ops.consoleresults import ConsoleResults, FirstBootOutcomes
from orchestrator.reconcile.bootstraps import BootstrapTracker
from orchestrator.reconcile.breaker import Breakers
from orchestrator.services.bootstrap_sources import console_readers
from orchestrator.services.status import daemon_view
from orchestrator.services.status_text import render_daemon
from orchestrator.sim.controller import admin
from orchestrator.workspace.daemonstatus import write_status

pytestmark = pytest.mark.integration

FIRST_BOOT = {
    "cpu": {"bootstrap": {"mode": "first-boot"}, "providers": {"sim": {"flavor": "c8.large", "image": "debian-12"}}}
}
FAILED = {"v": 1, "outcome": "failed", "step": "join", "message": "the controller refused the token \x1b[2J"}


def readers(config: Config) -> FirstBootOutcomes:
    # As the daemon builds it (services.bootstrap_sources.first_boot_results), every pass reading
    # again (the daemon's passes are seconds apart; a host is read at most every ``reread``).
    return ConsoleResults(lambda: config, console_readers(simulated_world()), reread=0.0)


def plant_console(world: World, instance_id: str, address: str, text: str) -> None:
    """What the host manager keeps of a booted host: its boot spec and its console output."""
    host_dir = world.ops.parts.config.sim_state_dir() / "hosts" / instance_id
    host_dir.mkdir(parents=True, exist_ok=True)
    (host_dir / "boot.json").write_text(json.dumps({"instance_id": instance_id, "address": address}))
    (host_dir / "boot.log").write_text(text)


def test_a_failed_first_boot_is_read_from_its_console_reported_and_its_host_returned(tmp_path: Path) -> None:
    with reconcile_world(tmp_path, templates=FIRST_BOOT, first_boot=readers) as world:
        admin.submit(world.ctl_state, "cpu", 2, 600.0)
        world.wait_demand(lambda wanted: wanted.get("cpu") == 2)
        world.passes(1)
        alive = agree(world)
        assert len(alive) == 2
        bad, good = sorted(alive.values(), key=lambda i: i.client_token)
        boot = "cloud-init: write_files done\n" + "x" * 70_000 + "\n"  # longer than what the cloud serves
        plant_console(world, bad.id, bad.address, boot + MARKER + json.dumps(FAILED) + "\n")
        plant_console(world, good.id, good.address, boot + MARKER + '{"v":1,"outcome":"started"}\n')

        [report] = world.passes(1)
        assert report.ok, report.to_json()
        assert set(agree(world)) == {good.client_token}  # the failed host was returned
        entries = world.audit()
        seen = [
            e["hosts"][bad.name] for e in entries if e["action"] == "reconcile-first-boot" and bad.name in e["hosts"]
        ]
        # No result at the first pass (nothing on the console yet), then the failure, once each.
        assert [s["outcome"] for s in seen] == ["no-result", "failed"]
        assert seen[-1]["step"] == "join" and "\x1b" not in seen[-1]["message"]
        [gave_up] = [e for e in entries if e["action"] == "reconcile-bootstrap-gave-up"]
        assert (gave_up["keys"], gave_up["reason"]) == ([bad.client_token], "first boot failed")
        config = world.ops.parts.config
        breakers = Breakers.load(config.state_dir, config.policy.breaker)
        assert len(breakers.state("cpu").failures) == 1  # counted like a failed push bootstrap

        # The status file and the metrics as the daemon writes them after this pass.
        records = BootstrapTracker.load(config.state_dir).records()
        document = build_document(
            daemon={"pid": 1, "state": "running", "reconcile_interval": 30.0},
            report=report,
            leases=[],
            breakers=breakers,
            facts={"sim": world.facts()},
            hosts=world.link.host_status(),
            now=world.clock(),
            bootstrap_records=records,
            config=config,
        )
        member = document["first_boot"]
        assert member["counts"]["sim"]["started"] == 1
        [failed] = member["failed"]
        assert (failed["host"], failed["step"]) == (bad.name, "join")
        metrics = DaemonMetrics()
        update_metrics(metrics, document, config, pass_duration=1.0, figures=PassFigures.of(report))
        text = generate_latest(metrics.registry).decode()
        assert 'xceprov_first_boot_failures_total{provider="sim",step="join"} 1.0' in text
        assert 'xceprov_first_boot_hosts{outcome="started",provider="sim"} 1.0' in text

        write_status(config.state_dir, {**document, "daemon": {**document["daemon"], "written": world.clock()}})
        view = daemon_view(config.state_dir)
        assert view is not None
        shown = "\n".join(render_daemon(type(view)(**{**view.__dict__, "running": True})))
        assert f"{bad.name} (sim, {bad.client_token}): failed at step join: the controller refused the token" in shown
        assert f"{good.name} (sim, {good.client_token}): started, not joined" in shown

        # The join deadline still returns a host that never joins, naming its last outcome.
        world.clock.advance(config.providers["sim"].join_deadline + 1)
        world.passes(1)
        assert good.client_token not in agree(world)  # (the demand stands: new hosts replace them)
        [overdue] = [e for e in world.audit() if e["action"] == "reconcile-join-overdue"]
        assert [(h["key"], h["first_boot"]) for h in overdue["hosts"]] == [(good.client_token, "started, not joined")]
