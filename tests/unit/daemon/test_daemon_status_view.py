"""``xceprov status`` reads the daemon's status file and the breakers: running, stale, stopped, none."""

from __future__ import annotations

import json
import os
import re
import socket
import time
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.clients.controller.types import LinkState
from orchestrator.configfile import LoadedConfig
from orchestrator.services.status import DaemonView, StatusReport, daemon_view, local_state
from orchestrator.services.status_text import render_breakers, render_text
from orchestrator.workspace.daemonstatus import write_status
from tests.unit.daemon.daemon_helpers import loaded

SITE_CONFIG = """
cluster: site1
state_dir: {state}
controller: {{addresses: ["127.0.0.1:{port}"], ca: {ca}, connect_timeout: 1, request_timeout: 1}}
providers: {{sim: {{module: xcesim}}, aws: {{module: xcesim}}}}
templates: {{cpu: {{providers: {{sim: {{flavor: c8, image: debian-12}}}}}}}}
"""


def offline_site(tmp_path: Path, state: Path) -> Path:
    """A site configuration whose controller address nobody listens on (a port free a moment ago)."""
    config = tmp_path / "xceprov.yaml"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config.write_text(SITE_CONFIG.format(state=state, port=port, ca=tmp_path / "ca.pem"))
    (tmp_path / "ca.pem").write_text("")
    return config


def running_document(written: float) -> dict[str, object]:
    return {
        "daemon": {
            "pid": os.getpid(),
            "state": "running",
            "written": written,
            "reconcile_interval": 30.0,
            "instance_id": "site-daemon-m1",
            "host": "m1",
            "passes": 12,
        },
        "last_pass": {"trigger": "demand", "finished": written},
        "leases": [
            {"provider": "aws", "held": False, "epoch": None, "remaining": 0.0, "note": "other-orchestrator"},
            {"provider": "sim", "held": True, "epoch": "3.2", "remaining": 9.25, "holder": "site-daemon-m1"},
        ],
        "reclaim_candidates": [{"provider": "sim", "host": "h0", "key": "op-a-000", "reason": "idle_time 300s passed"}],
    }


def report(view: DaemonView | None, breakers: tuple[dict[str, object], ...] = ()) -> StatusReport:
    return StatusReport(
        link=LinkState(True, "127.0.0.1:7441", "127.0.0.1:7441", 3),
        controller_id="sim", term=3, primary="127.0.0.1:7441", leases=(), demand=(), demand_seq=1,
        open_ops=(), hosts=0, pending_work=0, running_work=0, daemon=view, breakers=breakers,
    )  # fmt: skip


def test_running_daemon_shows_its_leases_with_age_and_reclaim_candidates(tmp_path: Path) -> None:
    write_status(tmp_path, running_document(time.time() - 5))
    view = daemon_view(tmp_path)
    assert view is not None and view.running and not view.stale
    text = render_text(report(view), ["aws", "sim"])
    assert "running  pid" in text and "instance site-daemon-m1  12 passes, last (demand) written 5s ago" in text
    assert "leases held by the daemon (as of 5s ago)" in text
    assert "  sim              held  epoch 3.2  valid 9.2s more" in text
    assert "  aws              not held: other-orchestrator" in text
    assert "  sim        h0  op-a-000  idle_time 300s passed" in text
    assert report(view).to_json()["daemon"]["leases"][1]["epoch"] == "3.2"
    # The report of before (controller, leases by its clock, demand, open ops) is still all there.
    assert text.startswith("controller  127.0.0.1:7441  primary 127.0.0.1:7441  term 3")
    assert "open ops\n  (none)" in text


def test_a_daemon_silent_for_several_intervals_is_flagged(tmp_path: Path) -> None:
    write_status(tmp_path, running_document(time.time() - 600))
    text = render_text(report(daemon_view(tmp_path)), ["sim"])
    assert "STALE: no pass ended for several reconcile intervals" in text


def test_no_daemon_is_said_plainly(tmp_path: Path) -> None:
    assert "daemon\n  no daemon (none has run with this state_dir)" in render_text(report(None), ["sim"])
    stopped = running_document(time.time() - 300)
    stopped["daemon"]["state"] = "stopped"  # type: ignore[index]
    write_status(tmp_path, stopped)
    text = render_text(report(daemon_view(tmp_path)), ["sim"])
    assert "no daemon (stopped; its last status was written 5m ago)" in text
    assert "held  epoch" not in text  # a stopped daemon's leases are not shown as held


def test_breakers_show_position_failures_and_why() -> None:
    row = {
        "template": "gpu", "position": "open", "failures": 3, "threshold": 3, "window": 1800.0,
        "opened_at": 1_800_000_000.0, "reopens_at": 1_800_003_600.0, "reason": "3 bootstrap failures within 1800s",
    }  # fmt: skip
    assert render_breakers(()) == ["breakers", "  (all closed)"]
    assert render_breakers((row,)) == [
        "breakers",
        "  gpu              open  3/3 failures  half-opens 2027-01-15T09:00:00Z  3 bootstrap failures within 1800s",
    ]


def test_state_that_cannot_be_read_is_named_and_the_rest_still_shown(tmp_path: Path) -> None:
    state = tmp_path / "state"
    base = loaded()
    site = LoadedConfig(base.config.model_copy(update={"state_dir": state}), base.source, base.base_dir)
    (state / "daemon").mkdir(parents=True)
    (state / "daemon" / "status.json").write_text("{broken")
    found = local_state(site)
    path = state / "daemon" / "status.json"
    assert found["breakers"] == ()  # readable: nothing recorded
    assert list(found["unreadable"]) == ["daemon"]
    assert found["unreadable"]["daemon"].startswith(f"{path}: not a daemon status file (")
    text = render_text(replace(report(None), unreadable=found["unreadable"]), ["sim"])
    assert f"daemon\n  not readable here: {path}: not a daemon status file" in text
    assert "breakers\n  (all closed)" in text


def test_the_daemon_s_shared_store_shows_its_share_or_since_when_it_is_unreachable_through_the_cli(
    tmp_path: Path,
) -> None:
    """No controller answers (an address nobody listens on): ``xceprov status`` still shows the
    daemon's status file, with its shared store's state, and exits 75."""
    state = tmp_path / "state"
    doc = running_document(time.time() - 2)
    doc["store"] = {
        "backend": "pg", "reachable": True, "unreachable_since": None, "error": "", "closed": "",
        "instance": "site-daemon-m1.1.aa", "label": "site-daemon-m1", "dealt": ["aws", "sim"],
        "members": [{"instance": "site-daemon-m1.1.aa"}, {"instance": "site-daemon-m2.2.bb"}],
    }  # fmt: skip
    write_status(state, doc)
    config = offline_site(tmp_path, state)
    result = CliRunner().invoke(cli, ["--config", str(config), "status"])
    assert result.exit_code == 75, result.output
    assert "  shared store: 2 live members; dealt to this daemon: aws, sim" in result.output

    doc["store"].update(  # type: ignore[attr-defined]
        {"reachable": False, "unreachable_since": 1_800_000_000.0, "error": "connection refused", "closed": "x"}
    )
    write_status(state, doc)
    result = CliRunner().invoke(cli, ["--config", str(config), "status"])
    assert result.exit_code == 75, result.output
    assert (
        "  store unreachable since 2027-01-15T08:00:00Z: connection refused; no mutation until it answers"
        in result.output
    )
    as_json = CliRunner().invoke(cli, ["--config", str(config), "status", "--json"])
    assert json.JSONDecoder().raw_decode(as_json.output)[0]["daemon"]["store"]["reachable"] is False


def test_the_bootstrap_share_of_a_burst_through_the_cli_in_text_and_json(tmp_path: Path) -> None:
    """``xceprov status`` (here with no controller: exit 75) shows the daemon's status file's
    bootstrap share per provider, as text and as ``--json``."""
    state = tmp_path / "state"
    doc = running_document(time.time() - 3)
    doc["bootstrap"] = {
        "aws": {"waiting": 0, "running": 0, "done": 0, "failed": 0},
        "sim": {"waiting": 60, "running": 20, "done": 17, "failed": 3},
    }
    write_status(state, doc)
    config = offline_site(tmp_path, state)
    result = CliRunner().invoke(cli, ["--config", str(config), "status"])
    assert result.exit_code == 75, result.output
    assert re.search(
        r"bootstrap of created hosts \(as of \ds ago\)\n"
        r"  aws              waiting 0  running 0  done 0  failed 0\n"
        r"  sim              waiting 60  running 20  done 17  failed 3\n",
        result.output,
    ), result.output
    as_json = CliRunner().invoke(cli, ["--config", str(config), "status", "--json"])
    found = json.JSONDecoder().raw_decode(as_json.output)[0]["daemon"]["bootstrap"]
    assert found["sim"] == {"waiting": 60, "running": 20, "done": 17, "failed": 3}

    del doc["bootstrap"]  # a status file of a daemon from before the bootstrap share
    write_status(state, doc)
    result = CliRunner().invoke(cli, ["--config", str(config), "status"])
    assert "bootstrap of created hosts" in result.output and "(not in this status file)" in result.output
