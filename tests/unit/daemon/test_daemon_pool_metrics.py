"""The warm pool in the status document and the metrics: its size, target, stopped cost."""

from __future__ import annotations

from pathlib import Path

from orchestrator.clients.controller.types import Epoch, Fact
from orchestrator.configfile import parse_config
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.statusdoc import cost_per_hour, instance_states, pool_sizes, update_metrics
from orchestrator.model.pool import FILL_DETAIL

SITE = """
cluster: site1
controller: {ca: system}
providers:
  sim: {module: xcesim}
templates:
  cpu:
    providers:
      sim: {flavor: c8, image: baked, cost_per_hour: 1.0, stopped_cost_per_hour: 0.1, warm_pool: 3}
"""


def fact(kind: str, fid: int, **kw: object) -> Fact:
    return Fact(kind, "sim", "op-a", Epoch(1, 1), fact_id=fid, committed=float(fid), **kw)  # type: ignore[arg-type]


def test_the_pool_is_counted_stopped_in_the_document_and_the_metrics() -> None:
    config = parse_config(SITE, "site.yaml", Path("/")).config
    facts = {
        "sim": [
            fact("requestIntent", 1, template="cpu", count=2, detail=FILL_DETAIL),
            fact("instanceCreated", 2, instance_key="op-a-000", template="cpu", instance_id="i-0"),
        ]
    }
    sizes = pool_sizes(facts, config)
    assert sizes == {"sim": {"cpu": {"stopped": 1, "pending": 1, "target": 3}}}
    # Never "created" (a host that does not join) nor "requested": waiting in the pool.
    assert instance_states(facts, []) == {"sim": {"pool": 2}}
    assert cost_per_hour(facts, config) == {"sim": {"cpu": 0.2}}
    metrics = DaemonMetrics()
    update_metrics(metrics, {"pools": sizes, "instances": instance_states(facts, [])}, config, None)
    labels = {"provider": "sim", "template": "cpu"}
    assert metrics.registry.get_sample_value("xceprov_warm_pool_instances", labels) == 1
    assert metrics.registry.get_sample_value("xceprov_warm_pool_target", labels) == 3
    assert metrics.registry.get_sample_value("xceprov_instances", {"provider": "sim", "state": "pool"}) == 2
    update_metrics(metrics, {"pools": {}}, config, None)  # the pool removed: its series read 0
    assert metrics.registry.get_sample_value("xceprov_warm_pool_instances", labels) == 0
