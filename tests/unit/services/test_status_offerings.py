"""``xceprov status`` and the daemon's status file count instances per offering, each at its
offering's price (an op made before offerings: its template's default offering)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.clients.controller.types import Epoch, Fact, LinkState
from orchestrator.configfile import parse_config
from orchestrator.daemon.statusdoc import cost_per_hour
from orchestrator.model.offerings import Placement, placement_detail
from orchestrator.reconcile.offered import offering_usage
from orchestrator.services.status import StatusReport, offering_rows
from orchestrator.services.status_text import render_text

E = Epoch(2, 5)
SITE = """
cluster: site1
controller: {ca: system}
providers:
  sim: {module: xcesim}
templates:
  wide:
    providers:
      sim:
        image: baked
        cost_per_hour: 0.5
        offerings:
          - {flavor: c8.large}
          - {flavor: c16.large, zone: zone-b, cost_per_hour: 0.8, slots: 2}
"""


def fact(kind: str, op: str, fid: int, **kw: object) -> Fact:
    return Fact(kind, "sim", op, E, fact_id=fid, committed=float(fid), **kw)  # type: ignore[arg-type]


FACTS = [
    fact(
        "requestIntent",
        "op-a",
        1,
        template="wide",
        count=3,
        detail=placement_detail([Placement("c16.large@zone-b", 2), Placement("c8.large", 1)]),
    ),
    fact("requestIntent", "op-old", 2, template="wide", count=1),  # before offerings: the default
    fact("requestIntent", "op-gone", 3, template="wide", count=1, detail=placement_detail([Placement("c8.large", 1)])),
    fact("returned", "op-gone", 4, instance_key="op-gone-000"),
]


def test_status_counts_instances_per_offering_at_its_price() -> None:
    config = parse_config(SITE, "site.yaml", Path("/")).config
    rows = offering_rows(config, {"sim": FACTS})
    assert [(r.template, r.offering, r.instances, r.cost_per_hour) for r in rows] == [
        ("wide", "c16.large@zone-b", 2, 1.6),
        ("wide", "c8.large", 2, 1.0),
    ]
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
        offerings=rows,
    )
    lines = render_text(report, ["sim"]).splitlines()
    at = lines.index("instances by offering (2.60 per hour)")
    assert lines[at + 2].split() == ["wide", "sim", "c16.large@zone-b", "2", "1.60"]
    assert lines[at + 3].split() == ["wide", "sim", "c8.large", "2", "1.00"]
    assert report.to_json()["offerings"][0] == {
        "provider": "sim",
        "template": "wide",
        "offering": "c16.large@zone-b",
        "instances": 2,
        "cost_per_hour": 1.6,
    }


def test_the_status_file_has_instances_by_offering_and_costs_each_at_its_offerings_price() -> None:
    config = parse_config(SITE, "site.yaml", Path("/")).config
    assert offering_usage(config, {"sim": FACTS}) == {
        "sim": {
            "wide": {
                "c16.large@zone-b": {"instances": 2, "cost_per_hour": 1.6},
                "c8.large": {"instances": 2, "cost_per_hour": 1.0},
            }
        }
    }
    assert cost_per_hour({"sim": FACTS}, config) == {"sim": {"wide": 2.6}}
