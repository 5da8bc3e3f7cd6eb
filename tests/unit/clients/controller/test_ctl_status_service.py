"""``xceprov status``: open ops derived from facts, and the text report."""

from __future__ import annotations

from orchestrator.clients.controller.types import Epoch, Fact, LinkState
from orchestrator.services.status import DemandRow, LeaseRow, OpenOp, StatusReport, open_ops, render_text

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
    assert set(ops) == {("op-a", "create"), ("op-c", "return")}
    assert ops[("op-a", "create")].done == 1 and ops[("op-a", "create")].wanted == 2
    assert ops[("op-a", "create")].epoch == "2.5"


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
