"""Every reason code, put in place by the real reconcile loop and read back where a user looks.

One case per code (issue 31's check): the real :class:`Reconciler` (a fake Terraform engine and
an in-memory fact log, on a clock the test moves) is put in the state, then its pass goes the
daemon's way: the status document (``xceprov status --json``, its ``reasons``), the journal
(``xceprov explain --json``), the metric ``xceprov_scale_out_reasons_total`` and the simulated
controller, told through ``reportReasons`` over a real connection (its ``ControllerStatus``
``reasons``, and ``xceprov sim controller status --json``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest

from orchestrator.cli.main import cli
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.reasons import report_reasons
from orchestrator.configfile import LoadedConfig, load_config
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.passfigures import PassFigures
from orchestrator.daemon.reasonreport import ReasonReporting
from orchestrator.daemon.statusdoc import build_document, update_metrics
from orchestrator.reconcile.loop import Reconciler
from orchestrator.reconcile.report import PassReport
from orchestrator.workspace.daemonstatus import write_status
from orchestrator.workspace.workdir import ProviderWorkdir
from tests.sim_controller_helpers import Running, controller_block, running_controller
from tests.tffake import FakeEngine, FakeFence, FakeHosts, FakeView, StampedFacts, unit_ops

ROOT = Path(__file__).resolve().parents[3]
NOW = 1_800_000_000.0


@dataclass
class Loop:
    """The reconciler and what the test turns: demand, clock, fence, engine."""

    loaded: LoadedConfig
    reconciler: Reconciler
    view: FakeView
    engine: FakeEngine
    fence: FakeFence
    reporting: ReasonReporting
    now: list[float] = field(default_factory=lambda: [NOW])
    reports: list[PassReport] = field(default_factory=list)

    def run(self) -> PassReport:
        """One pass, its reasons journaled and told to the controller (as the daemon does)."""
        report = self.reconciler.run_once()
        self.reporting.after_pass(report, self.now[0])
        self.reports.append(report)
        return report

    def advance(self, seconds: float) -> None:
        self.now[0] += seconds


def launched(loop: Loop) -> None:
    loop.view.want(cpu=2)
    loop.run()


def over_room(loop: Loop) -> None:
    loop.view.want(cpu=8)  # more than max_instances, or a rest below one granule
    loop.run()


def cooldown(loop: Loop) -> None:
    launched(loop)
    loop.view.want(cpu=4)
    loop.advance(5)  # within policy.cooldown (30 s)
    loop.run()


def refused(error: str) -> Callable[[Loop], None]:
    def arrange(loop: Loop) -> None:
        loop.engine.refuse_creates = error  # the cloud refuses: the memory of refusals holds it
        launched(loop)

    return arrange


def no_lease(loop: Loop) -> None:
    loop.fence.revoked = True
    launched(loop)


def breaker_open(loop: Loop) -> None:
    for _ in range(3):  # policy.breaker.failures
        loop.reconciler.breakers.failure("cpu", "bootstrap", "the play failed", loop.now[0])
    launched(loop)


def open_op(loop: Loop) -> None:
    loop.engine.fail_apply.add(ProviderWorkdir(loop.loaded.config, "sim", ROOT).path)
    launched(loop)  # the create fails: its op stays open, retried after policy.retry.base
    loop.view.want(cpu=4)
    loop.advance(1)
    loop.run()


@dataclass(frozen=True)
class Case:
    code: str
    arrange: Callable[[Loop], None]
    site: dict[str, Any] = field(default_factory=dict)  # merged into the provider / policy blocks
    policy: dict[str, Any] = field(default_factory=dict)
    side: dict[str, Any] = field(default_factory=lambda: {"flavor": "c8.large"})  # the template's sim block


CASES = [
    Case("launched", launched),
    Case("budget", launched, {"budget_per_hour": 0.2}),
    Case("cooldown", cooldown),
    Case("max-instances", over_room, {"max_instances": 2}),
    Case("granularity", over_room, {"max_instances": 6, "granularity": 4}),
    Case("backoff", refused("InsufficientCapacity: flavor c8.large has no capacity (limit 0)")),
    Case("quota", refused("InstanceLimitExceeded: the account may run at most 0 instances (0 live)")),
    Case("no-lease", no_lease),
    Case("breaker-open", breaker_open),
    Case("open-op", open_op, policy={"cooldown": 0, "retry": {"base": 600, "max": 1200}}),
    Case("no-offering", launched, side={"select": {"cpus": {"min": 4096}}}),  # no catalogue flavor fits
]  # fmt: skip


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Running]:
    with running_controller(tmp_path / "ctl") as running:
        yield running


def site(tmp_path: Path, controller: Running, case: Case) -> LoadedConfig:
    host, port = controller.addr
    doc = {
        "cluster": "unit",
        "state_dir": str(tmp_path / "state"),
        "controller": controller_block(controller.state_dir, f"{host}:{port}", "daemon"),
        "sim": {"state_dir": str(controller.state_dir)},
        "providers": {"sim": {"module": "xcesim", "max_instances": 10, **case.site}},
        "templates": {"cpu": {"providers": {"sim": {**case.side, "image": "debian-12", "cost_per_hour": 0.5}}}},
        "policy": case.policy,
    }
    path = tmp_path / "xceprov.yaml"
    path.write_text(json.dumps(doc))
    return load_config(str(path))


def command(loaded: LoadedConfig, *args: str) -> dict[str, Any]:
    out = CliRunner().invoke(cli, ["--config", str(loaded.source), *args])
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", CASES, ids=[c.code for c in CASES])
def test_each_reason_code_reads_back_from_status_explain_the_metric_and_the_controller(
    tmp_path: Path, controller: Running, case: Case
) -> None:
    loaded = site(tmp_path, controller, case)
    config = loaded.config
    link = ControllerLink(config.controller, instance_id="reasons-test", providers=["sim"], cluster="unit")
    link.start()
    try:
        assert link.wait_connected(20), "the link never joined"
        now = [NOW]
        engine, facts, hosts, fence = FakeEngine(), StampedFacts(lambda: now[0]), FakeHosts(), FakeFence()
        ops = unit_ops(loaded, engine, facts=facts, hosts=hosts, clock=lambda: now[0], fence=fence)
        view = FakeView(facts, hosts)
        reconciler = Reconciler(config, ops, view, clock=lambda: now[0], state_dir=config.state_dir)
        reporting = ReasonReporting(config.state_dir, lambda reasons, at: report_reasons(link, reasons, at))
        loop = Loop(loaded, reconciler, view, engine, fence, reporting, now)
        case.arrange(loop)
        last = loop.reports[-1]
        assert case.code in {r.code for r in last.reasons["cpu"]}, last.reasons

        # The daemon's status file, as written after the pass: `xceprov status --json`.
        daemon = {"pid": os.getpid(), "state": "running", "instance_id": "reasons-test", "passes": 1}
        document = build_document(
            daemon={**daemon, "reconcile_interval": 30.0, "started": time.time()},
            report=last,
            leases=[],
            breakers=reconciler.breakers,
            facts={"sim": facts.facts("sim")},
            hosts=[],
            now=time.time(),
            config=config,
        )
        write_status(config.state_dir, document)
        status = command(loaded, "status", "--json")
        assert case.code in [r["code"] for r in status["reasons"]["cpu"]]

        # The history: `xceprov explain --json`.
        explained = command(loaded, "explain", "cpu", "--json")
        assert case.code in [r["code"] for entry in explained["history"] for r in entry["reasons"]]
        assert case.code in [r["code"] for r in explained["current"]["cpu"]]

        # The metric, counted once per pass per reason.
        metrics = DaemonMetrics()
        update_metrics(metrics, document, config, 0.1, PassFigures.of(last))
        text = generate_latest(metrics.registry).decode()
        assert f'xceprov_scale_out_reasons_total{{code="{case.code}",template="cpu"}} 1.0' in text

        # The controller was told the template's first reason that held its demand back.
        told = {r.template: r for r in link.query_status().reasons}
        assert told["cpu"].code == case.code, told
        assert told["cpu"].detail and case.code in told["cpu"].detail
        shown = command(loaded, "sim", "controller", "status", "--json")
        assert [(r["template"], r["code"]) for r in shown["reasons"]] == [("cpu", case.code)]
        text = CliRunner().invoke(cli, ["--config", str(loaded.source), "sim", "controller", "status"]).output
        assert f"reason cpu: {case.code}: " in text
    finally:
        link.close()
