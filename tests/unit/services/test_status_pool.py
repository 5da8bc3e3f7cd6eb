"""``xceprov status`` lists each warm pool (stopped count, target, instances), text and JSON."""

from __future__ import annotations

from pathlib import Path

from orchestrator.clients.controller.types import Epoch, Fact, LinkState
from orchestrator.configfile import parse_config
from orchestrator.model.pool import FILL_DETAIL, start_detail
from orchestrator.services.status import StatusReport, pool_rows
from orchestrator.services.status_text import render_text

E = Epoch(2, 5)
SITE = """
cluster: site1
controller: {ca: system}
providers:
  sim: {module: xcesim}
templates:
  cpu:
    providers:
      sim: {flavor: c8, image: baked, warm_pool: 3}
  gpu:
    providers:
      sim: {flavor: g4, image: baked}
"""


def fact(kind: str, op: str, fid: int, **kw: object) -> Fact:
    return Fact(kind, "sim", op, E, fact_id=fid, committed=float(fid), **kw)  # type: ignore[arg-type]


def test_status_lists_each_pool_with_its_stopped_instances_target_and_fill_on_its_way() -> None:
    config = parse_config(SITE, "site.yaml", Path("/")).config
    facts = [
        fact("requestIntent", "op-a", 1, template="cpu", count=2, detail=FILL_DETAIL),
        fact("instanceCreated", "op-a", 2, instance_key="op-a-000", host_name="h-a0", instance_id="i-a0"),
        fact("instanceCreated", "op-a", 3, instance_key="op-a-001", host_name="h-a1", instance_id="i-a1"),
        # One was taken by demand: it left the pool.
        fact("requestIntent", "op-s", 4, template="cpu", detail=start_detail(["op-a-000"])),
        # A fill on its way (no instance yet).
        fact("requestIntent", "op-b", 5, template="cpu", count=1, detail=FILL_DETAIL),
    ]
    [row] = pool_rows(config, {"sim": facts})
    assert (row.provider, row.template, row.stopped, row.target, row.pending, row.instances) == (
        "sim",
        "cpu",
        1,
        3,
        1,
        ("h-a1",),
    )
    report = StatusReport(
        link=LinkState(True, "127.0.0.1:7441", "127.0.0.1:7441", 3),
        controller_id="sim",
        term=3,
        primary="127.0.0.1:7441",
        leases=(),
        demand=(),
        demand_seq=1,
        open_ops=(),
        hosts=0,
        pending_work=0,
        running_work=0,
        pools=(row,),
    )
    lines = render_text(report, ["sim"]).splitlines()
    at = lines.index("warm pools")
    assert lines[at + 2].split() == ["cpu", "sim", "1", "3", "1", "h-a1"]
    [pool] = report.to_json()["pools"]
    assert pool == {
        "provider": "sim",
        "template": "cpu",
        "target": 3,
        "stopped": 1,
        "pending": 1,
        "instances": ("h-a1",),
    }
