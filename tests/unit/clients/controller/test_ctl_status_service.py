"""``xceprov status``: open ops derived from facts, and the text report."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from click.testing import CliRunner
from ctlfake import FakeController, Pki

from orchestrator.cli.main import cli
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.messages import controller_status
from orchestrator.clients.controller.types import Epoch, Fact, LinkState
from orchestrator.model.config import ControllerSettings
from orchestrator.services.status import DemandRow, LeaseRow, OpenOp, StatusReport, open_ops
from orchestrator.services.status_text import render_text

E = Epoch(2, 5)


def fact(kind: str, op: str, fid: int, **kw: object) -> Fact:
    return Fact(kind, "sim", op, E, fact_id=fid, **kw)  # type: ignore[arg-type]


def test_open_ops_from_facts() -> None:
    facts = [
        fact("requestIntent", "op-a", 1, template="cpu", count=2),
        fact("instanceCreated", "op-a", 2, instance_key="op-a-000"),
        fact("requestIntent", "op-b", 3, template="gpu", count=1),
        fact("instanceCreated", "op-b", 4, instance_key="op-b-000"),
        fact("returning", "op-c", 5, instance_key="op-c-000", template="cpu"),
        fact("returning", "op-d", 6, instance_key="op-d-000"),
        fact("returned", "op-d", 7, instance_key="op-d-000"),
        fact("requestIntent", "op-e", 8, template="cpu", count=3),
        fact("lost", "op-e", 9, instance_key="op-e-001"),
    ]
    ops = {(o.op_id, o.action): o for o in open_ops(facts)}
    # op-e lost one of three instances and created none: still open, crash recovery needs it.
    assert set(ops) == {("op-a", "create"), ("op-c", "return"), ("op-e", "create")}
    assert ops[("op-a", "create")].done == 1 and ops[("op-a", "create")].wanted == 2
    assert ops[("op-a", "create")].epoch == "2.5"
    assert (ops[("op-e", "create")].done, ops[("op-e", "create")].wanted) == (1, 3)


def test_create_op_with_a_lost_instance_stays_open_until_every_instance_is_accounted_for() -> None:
    intent = fact("requestIntent", "op-f", 1, template="cpu", count=3)
    created = [fact("instanceCreated", "op-f", 2 + i, instance_key=f"op-f-00{i}") for i in range(2)]
    lost = fact("lost", "op-f", 9, instance_key="op-f-000")
    [still_open] = open_ops([intent, *created, lost])
    assert (still_open.op_id, still_open.action, still_open.done, still_open.wanted) == ("op-f", "create", 2, 3)
    # The third instance created: the op is complete even though one of its hosts was lost since.
    third = fact("instanceCreated", "op-f", 10, instance_key="op-f-002")
    assert [o for o in open_ops([intent, *created, lost, third]) if o.action == "create"] == []


def test_text_report_shows_free_and_held_leases_demand_and_ops() -> None:
    report = StatusReport(
        link=LinkState(True, "127.0.0.1:7441", "127.0.0.1:7441", 3),
        controller_id="sim",
        term=3,
        primary="127.0.0.1:7441",
        leases=(LeaseRow("sim", "orch-a", "3.1", 12.5, 0.0),),
        demand=(DemandRow("cpu", 2, 4, 1, 3, 2, 1),),
        demand_seq=9,
        open_ops=(OpenOp("sim", "op-a", "create", "cpu", 2, 1, "3.1", 0.0),),
        hosts=3,
        pending_work=1,
        running_work=1,
    )
    text = render_text(report, ["aws", "sim"])
    assert "primary 127.0.0.1:7441  term 3" in text
    assert "sim              holder orch-a  epoch 3.1  expires in 12.5s" in text
    assert "aws              free" in text
    assert "cpu" in text and "op-a" in text and "1/2" in text
    assert report.to_json()["leases"][0]["holder"] == "orch-a"


def test_status_reply_term_start_is_parsed_into_seconds(fake: FakeController, pki: Pki) -> None:
    started_ms = 1_800_000_123_456
    fake.handlers["queryStatus"] = lambda *_: (
        "status",
        {"controllerId": "fake", "term": 4, "termStartedMs": started_ms},
    )
    settings = ControllerSettings(addresses=[fake.address], ca=pki.ca, connect_timeout=2.0, request_timeout=2.0)
    with ControllerLink(settings, instance_id="orch-status") as link:
        link.open()
        status = link.query_status()
    assert (status.term, status.term_started) == (4, started_ms / 1000)


def test_a_controller_that_does_not_report_the_term_start_gives_zero() -> None:
    assert controller_status({"term": 2}).term_started == 0.0


def test_text_and_json_show_when_the_term_started() -> None:
    base = StatusReport(
        link=LinkState(True, "127.0.0.1:7441", "127.0.0.1:7441", 3),
        controller_id="sim", term=3, primary="127.0.0.1:7441", leases=(), demand=(), demand_seq=1,
        open_ops=(), hosts=0, pending_work=0, running_work=0,
    )  # fmt: skip
    started = replace(base, term_started=1_800_000_000.0)
    assert "term 3 since 2027-01-15T08:00:00Z  id sim" in render_text(started, ["sim"])
    assert started.to_json()["term_started"] == 1_800_000_000.0
    # Unknown (an older controller): the term alone, never a made-up time.
    assert "term 3  id sim" in render_text(base, ["sim"])


def test_controller_text_with_control_characters_prints_escaped_through_the_cli(
    fake: FakeController, pki: Pki, tmp_path: Path
) -> None:
    """A controller whose id, lease holder and demand template hold ESC sequences and newlines:
    ``xceprov status`` prints each escaped on its own line, and forges no line of the report."""
    hostile = "evil\x1b[2J\nforged line"
    fake.handlers["queryStatus"] = lambda *_: (
        "status",
        {
            "controllerId": hostile,
            "term": 4,
            "leases": [{"provider": "sim", "holder": hostile, "epoch": {"term": 4, "seq": 1}, "expiresInMs": 9000}],
            "demand": {"seq": 3, "term": 4, "templates": [{"template": hostile, "wanted": 2}]},
        },
    )
    config = tmp_path / "xceprov.yaml"
    config.write_text(
        json.dumps(
            {
                "cluster": "unit",
                "state_dir": str(tmp_path / "state"),
                "controller": {"addresses": [fake.address], "ca": str(pki.ca), "connect_timeout": 2},
                "providers": {"sim": {"module": "xcesim"}},
                "templates": {"cpu": {"providers": {"sim": {"flavor": "c8", "image": "debian-12"}}}},
            }
        )
    )
    result = CliRunner().invoke(cli, ["--config", str(config), "status"])
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    lines = result.output.splitlines()
    assert not [line for line in lines if line.startswith("forged")]
    shown = "evil\\x1b[2J\\nforged line"
    assert f"id {shown}" in lines[0]
    assert any(line.startswith("  sim") and f"holder {shown}" in line for line in lines)
    assert any(line.startswith(f"  {shown}") for line in lines)
