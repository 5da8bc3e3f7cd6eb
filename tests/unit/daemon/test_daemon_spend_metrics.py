"""Spend in the status document and the metrics: ``xceprov_spend_total`` (a counter since the
daemon started) and ``xceprov_spend_rate_per_hour``; ``promtool check metrics`` clean."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest

from orchestrator.clients.controller.types import Epoch, Fact
from orchestrator.configfile import parse_config
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.statusdoc import update_metrics
from orchestrator.model.offerings import Offering
from orchestrator.reconcile.costs import spend_document
from tests.monitoring_helpers import promtool_problems

# One provider, one template at 3.6 per hour: a second of it costs 0.001.
SITE = "\n".join(
    [
        "cluster: site1",
        "controller: {ca: system}",
        "providers: {sim: {module: xcesim}}",
        "templates: {cpu: {providers: {sim: {flavor: c8, image: baked, cost_per_hour: 3.6}}}}",
    ]
)
LABELS = {"provider": "sim", "template": "cpu"}


def fact(kind: str, fid: int, committed: float, **kw: object) -> Fact:
    return Fact(kind, "sim", "op-a", Epoch(1, 1), fact_id=fid, committed=committed, **kw)  # type: ignore[arg-type]


FACTS = {
    "sim": [
        fact("requestIntent", 1, 1000.0, template="cpu", count=2),
        fact("instanceCreated", 2, 1000.0, instance_key="op-a-000", template="cpu", instance_id="i-0"),
        fact("instanceCreated", 3, 1000.0, instance_key="op-a-001", template="cpu", instance_id="i-1"),
        fact("returned", 4, 1100.0, instance_key="op-a-001", template="cpu"),
    ]
}


def test_spend_counts_up_from_the_daemon_start_and_the_rate_is_the_live_instances() -> None:
    config = parse_config(SITE, "site.yaml", Path("/")).config
    metrics = DaemonMetrics()
    # Daemon started at 1050: 150 s of op-a-000 and 50 s of op-a-001 at 3.6 per hour.
    first = spend_document(config, FACTS, 1050.0, 1200.0)
    assert first["total"] == {"sim": {"cpu": 0.2}} and first["rate_per_hour"] == {"sim": {"cpu": 3.6}}
    update_metrics(metrics, {"spend": first}, config, None)
    assert metrics.registry.get_sample_value("xceprov_spend_total", LABELS) == pytest.approx(0.2)
    assert metrics.registry.get_sample_value("xceprov_spend_rate_per_hour", LABELS) == 3.6
    update_metrics(metrics, {"spend": spend_document(config, FACTS, 1050.0, 1300.0)}, config, None)
    assert metrics.registry.get_sample_value("xceprov_spend_total", LABELS) == pytest.approx(0.3)
    problems = promtool_problems(generate_latest(metrics.registry).decode())
    if problems is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    assert problems == ""


def test_a_select_templates_spend_is_at_the_offering_the_last_pass_selected() -> None:
    text = SITE.replace("flavor: c8, image: baked, cost_per_hour: 3.6", "select: {}, image: baked, cost_per_hour: 36")
    config = parse_config(text, "site.yaml", Path("/")).config
    selected = {("cpu", "sim"): [Offering("c8", "c8", cost_per_hour=3.6, source="catalogue")]}
    doc = spend_document(config, FACTS, 1050.0, 1200.0, selected)
    assert doc["total"] == {"sim": {"cpu": 0.2}} and doc["rate_per_hour"] == {"sim": {"cpu": 3.6}}
    # Without the selections: the template's cost_per_hour (docs/cost.md, "The limits").
    assert spend_document(config, FACTS, 1050.0, 1200.0)["rate_per_hour"] == {"sim": {"cpu": 36.0}}
