"""``xceprov cost``'s report of orphans (docs/cost.md, "Orphans"): an adopted orphan is an
instance of op ``orphan:<id>`` in the total; a reported one is listed under ``unowned``, not in
the total, and the text says so in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.configfile import parse_config
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.ops.facts import standalone_facts
from orchestrator.services.cost import cost_report

SITE = """
cluster: demo
standalone: true
state_dir: {state}
controller: {{ca: system}}
providers:
  sim: {{module: xcesim}}
templates:
  cpu:
    providers:
      sim: {{image: debian-12, flavor: c8, cost_per_hour: 3.6}}
"""


def test_adopted_in_the_total_reported_apart(tmp_path: Path) -> None:
    loaded = parse_config(SITE.format(state=tmp_path / "state"), "site.yaml", tmp_path)
    journal = standalone_facts(loaded.config)
    detail = json.dumps({"class": "b", "launch_time": "1970-01-01T00:00:00Z"})
    for kind, cloud_id in ((FactKind.ORPHAN_ADOPTED, "i-a"), (FactKind.ORPHAN_REPORTED, "i-b")):
        ids = {"instance_key": cloud_id, "instance_id": cloud_id, "template": "cpu"}
        journal.commit(Fact(kind, "sim", "orphans", Epoch(0, 0), detail=detail, **ids))
    report = cost_report(loaded, 0, 1000, "op")
    doc = report.to_json()
    assert doc["totals"] == {"orphan:i-a": 1.0} and doc["total"] == 1.0
    assert doc["unowned"] == [
        {
            "provider": "sim",
            "instance_id": "i-b",
            "template": "cpu",
            "launched": 0.0,
            "reported": pytest.approx(doc["unowned"][0]["reported"]),
            "estimated_cost": 1.0,
        }
    ]
    assert "unowned: 1 reported orphan(s), not in the total, 1.000000 if still running" in report.text()
