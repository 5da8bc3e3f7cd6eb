"""First-boot outcomes where bootstrap results are reported: the status file, the metrics,
``xceprov status`` (text and ``--json``).

What a user would notice: per provider the first-boot hosts by outcome, each host not joined
with its outcome line, the recent failed first boots with their step and message (kept over
passes and a restart), the ``xceprov_first_boot_hosts`` and ``xceprov_first_boot_failures``
metrics (``promtool check metrics`` clean), and nothing of this for a site without first-boot hosts.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from orchestrator.clients.controller.types import HostInfo
from orchestrator.configfile import parse_config
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.statusdoc import build_document, first_boot_share, update_metrics
from orchestrator.model.config import BreakerSettings
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.model.pool import FILL_DETAIL, start_detail
from orchestrator.reconcile.bootstraps import BootstrapRecord
from orchestrator.reconcile.breaker import Breakers
from orchestrator.services.status import daemon_view
from orchestrator.services.status_text import render_daemon
from orchestrator.workspace.daemonstatus import write_status
from tests.unit.daemon.test_daemon_statusdoc import samples

CONFIG = parse_config(
    """
cluster: site1
controller: {ca: system, join_key: join.key}
providers:
  sim: {module: xcesim}
templates:
  cpu:
    bootstrap: {mode: first-boot}
    providers: {sim: {flavor: c8.large, image: debian-12}}
  gpu:
    providers: {sim: {flavor: g4.xlarge, image: debian-12}}
""",
    "site.yaml",
    Path("/"),
).config
E = Epoch(1, 1)


def facts() -> list[Fact]:
    out = [Fact(FactKind.REQUEST_INTENT, "sim", "op-a", E, fact_id=1, template="cpu", count=4)]
    for i in range(4):
        common = {"instance_key": f"op-a-00{i}", "template": "cpu", "host_name": f"cpu-{i}", "instance_id": f"i-{i}"}
        out.append(Fact(FactKind.INSTANCE_CREATED, "sim", "op-a", E, fact_id=2 + 2 * i, **common))
        out.append(Fact(FactKind.EXPECTED_HOST, "sim", "op-a", E, fact_id=3 + 2 * i, **common))
    out.append(Fact(FactKind.REQUEST_INTENT, "sim", "op-b", E, fact_id=20, template="gpu", count=1))
    out.append(Fact(FactKind.INSTANCE_CREATED, "sim", "op-b", E, fact_id=21, instance_key="op-b-000", template="gpu"))
    return out


RECORDS = [
    BootstrapRecord("op-a-000", "sim", "cpu", "cpu-0", joined=True, first_boot="joined", first_boot_line="joined"),
    BootstrapRecord("op-a-001", "sim", "cpu", "cpu-1", first_boot="started", first_boot_line="started, not joined"),
    BootstrapRecord(
        "op-a-002", "sim", "cpu", "cpu-2", first_boot="unreadable", first_boot_line="unreadable result: not JSON"
    ),
    # op-a-003: never read yet (no record): no result yet. op-b-000: a pushed gpu host, not counted.
]
HOSTS = [HostInfo("cpu-0", "idle", instance_key="op-a-000", provider="sim")]
FAILED = {
    "provider": "sim",
    "template": "cpu",
    "host": "cpu-9",
    "key": "op-z-009",
    "step": "join",
    "message": "token refused",
    "op": "op-r",
}


def document(tmp_path: Path, failed: list[dict[str, str]] | None = None) -> dict[str, object]:
    return build_document(
        daemon={"pid": 42, "state": "running", "reconcile_interval": 30.0},
        report=None,
        leases=[],
        breakers=Breakers.load(tmp_path, BreakerSettings()),
        facts={"sim": facts()},
        hosts=HOSTS,
        now=2000.0,
        bootstrap_records=RECORDS,
        config=CONFIG,
        first_boot_failed=failed or [],
    )


def test_the_status_file_counts_first_boot_hosts_and_lists_those_not_joined(tmp_path: Path) -> None:
    member = document(tmp_path, [FAILED])["first_boot"]
    assert member == {
        "counts": {"sim": {"no-result": 1, "unreadable": 1, "started": 1, "failed": 0, "joined": 1}},
        "hosts": [
            {
                "provider": "sim",
                "host": "cpu-1",
                "key": "op-a-001",
                "outcome": "started",
                "line": "started, not joined",
            },
            {
                "provider": "sim",
                "host": "cpu-2",
                "key": "op-a-002",
                "outcome": "unreadable",
                "line": "unreadable result: not JSON",
            },
            {"provider": "sim", "host": "cpu-3", "key": "op-a-003", "outcome": "no-result", "line": "no result yet"},
        ],
        "failed": [FAILED],
    }


def test_warm_pool_instances_waiting_stopped_are_no_first_boot_hosts_yet() -> None:
    # A pool of first-boot cpu instances: launched stopped, never booted; once a start takes one
    # (its expectedHost), it is a first-boot host like a created one.
    fill = [Fact(FactKind.REQUEST_INTENT, "sim", "op-p", E, fact_id=30, template="cpu", count=2, detail=FILL_DETAIL)]
    for i in range(2):
        common = {"instance_key": f"op-p-00{i}", "template": "cpu", "host_name": f"pool-{i}", "instance_id": f"i-p{i}"}
        fill.append(Fact(FactKind.INSTANCE_CREATED, "sim", "op-p", E, fact_id=31 + i, **common))
    taken = {"instance_key": "op-p-000", "template": "cpu", "host_name": "pool-0", "instance_id": "i-p0"}
    start = [
        Fact(FactKind.REQUEST_INTENT, "sim", "op-s", E, fact_id=40, template="cpu", detail=start_detail(["op-p-000"])),
        Fact(FactKind.EXPECTED_HOST, "sim", "op-s", E, fact_id=41, **taken),
    ]
    member = first_boot_share({"sim": fill + start}, [], [], CONFIG)
    assert member["counts"] == {"sim": {"no-result": 1, "unreadable": 0, "started": 0, "failed": 0, "joined": 0}}
    assert [row["host"] for row in member["hosts"]] == ["pool-0"]


def test_metrics_name_every_outcome_and_scrape_clean(tmp_path: Path) -> None:
    metrics = DaemonMetrics()
    update_metrics(metrics, document(tmp_path), CONFIG, pass_duration=None)
    metrics.first_boot_failed("sim", "join")
    got = samples(metrics)
    for outcome, value in (("no-result", 1), ("unreadable", 1), ("started", 1), ("failed", 0), ("joined", 1)):
        assert got[("xceprov_first_boot_hosts", (("outcome", outcome), ("provider", "sim")))] == value
    assert got[("xceprov_first_boot_failures_total", (("provider", "sim"), ("step", "join")))] == 1
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    text = generate_latest(metrics.registry).decode()
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_xceprov_status_shows_outcomes_and_failures_in_text_and_json(tmp_path: Path) -> None:
    hostile = {**FAILED, "message": "token\x1b[2J refused"}
    doc = document(tmp_path, [hostile])
    write_status(tmp_path / "state", {**doc, "daemon": {**doc["daemon"], "written": 2000.0}})  # type: ignore[dict-item]
    view = daemon_view(tmp_path / "state")
    assert view is not None and view.first_boot is not None
    assert view.first_boot["failed"][0]["step"] == "join"  # what --json prints (asdict of the view)
    view = type(view)(**{**view.__dict__, "running": True})
    text = "\n".join(render_daemon(view))
    assert "  sim              no-result 1  unreadable 1  started 1  failed 0  joined 1" in text
    assert "  cpu-1 (sim, op-a-001): started, not joined" in text
    assert "  cpu-9 (sim, op-z-009): failed at step join: token\x1b[2J refused; returned by op op-r" in text
    from orchestrator.model.text import printable

    assert "\x1b" not in printable(text)  # render_text passes every line through printable


def test_a_site_without_first_boot_hosts_shows_nothing_new(tmp_path: Path) -> None:
    pushed = CONFIG.model_copy(update={"templates": {"gpu": CONFIG.templates["gpu"]}})
    doc = build_document(
        daemon={"pid": 42, "state": "running"},
        report=None,
        leases=[],
        breakers=Breakers.load(tmp_path, BreakerSettings()),
        facts={"sim": [f for f in facts() if f.template == "gpu"]},
        hosts=[],
        now=2000.0,
        config=pushed,
    )
    assert doc["first_boot"] == {"counts": {}, "hosts": [], "failed": []}
    write_status(tmp_path / "state", {**doc, "daemon": {**doc["daemon"], "written": 2000.0, "reconcile_interval": 30}})  # type: ignore[dict-item]
    view = daemon_view(tmp_path / "state")
    assert view is not None
    view = type(view)(**{**view.__dict__, "running": True})
    assert "first boot" not in "\n".join(render_daemon(view))


def test_failures_are_kept_once_each_over_passes() -> None:
    from orchestrator.daemon.statusdoc import recent_failures

    older = [{**FAILED, "key": f"op-z-{n:03d}"} for n in range(25)]
    kept = recent_failures(older, [FAILED, FAILED])
    assert len(kept) == 20 and kept[-1] == FAILED and json.dumps(kept).count('"op-z-009"') == 1


def test_a_restarted_daemon_keeps_showing_the_failures_its_last_status_had(tmp_path: Path) -> None:
    from orchestrator.daemon.publish import StatusPublishing

    config = CONFIG.model_copy(update={"state_dir": tmp_path / "state"})
    publisher = StatusPublishing()
    publisher.config, publisher._document = config, None
    assert publisher.first_boot_failures() == []  # no daemon ran here
    doc = document(tmp_path, [FAILED])
    write_status(config.state_dir, {**doc, "daemon": {**doc["daemon"], "written": 2000.0}})  # type: ignore[dict-item]
    assert publisher.first_boot_failures() == [FAILED]  # at the start: the file a daemon before left
    (config.state_dir / "daemon" / "status.json").write_text("{not json")
    assert publisher.first_boot_failures() == []  # a damaged file: written anew without them
