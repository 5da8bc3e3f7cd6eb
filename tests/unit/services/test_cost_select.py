"""``xceprov cost`` prices an instance of a ``select:`` template at its selected offering's
price (the catalogue's), not at the template's ``cost_per_hour`` (docs/cost.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.model.costs import launch_detail
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.model.offerings import Placement, placement_detail
from orchestrator.ops.catalogue import CatalogueReader
from orchestrator.ops.facts import standalone_facts
from orchestrator.paths import toolkit_root
from orchestrator.services import cost
from tests.catalogue_fake import CatalogueEngine

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
      sim: {{image: debian-12, cost_per_hour: 9.0, {way}}}
"""


def _loaded(tmp_path: Path, way: str) -> LoadedConfig:
    return parse_config(SITE.format(state=tmp_path / "state", way=way), "site.yaml", tmp_path)


def _one_instance(loaded: LoadedConfig, offering: str) -> None:
    """An op that placed one instance on ``offering``, launched at 3600, returned at 7200."""
    journal = standalone_facts(loaded.config)
    epoch = Epoch(0, 0)
    detail = placement_detail([Placement(offering, 1)])
    launched = launch_detail({"launch_time": "1970-01-01T01:00:00Z"})
    key = {"instance_key": "op-1-000", "instance_id": "i-1", "template": "cpu"}
    journal.commit(Fact(FactKind.REQUEST_INTENT, "sim", "op-1", epoch, template="cpu", count=1, detail=detail))
    journal.commit(Fact(FactKind.INSTANCE_CREATED, "sim", "op-1", epoch, host_name="h", detail=launched, **key))
    journal.commit(Fact(FactKind.RETURNED, "sim", "op-1", epoch, committed=7200.0, **key))


def test_a_select_template_costs_its_selected_offerings_price(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = _loaded(tmp_path, "select: {cpus: {min: 4}}")
    engine = CatalogueEngine()
    reader = CatalogueReader(loaded.config, toolkit_root(), lambda: engine)  # type: ignore[arg-type,return-value]
    monkeypatch.setattr(cost, "catalogue_reader", lambda config: reader)
    _one_instance(loaded, "c8")
    [item] = cost.cost_report(loaded, 0, 10_000, "provider").items
    assert item.offering == "c8" and item.running_seconds == 3600
    assert item.cost == pytest.approx(0.32)  # the catalogue's c8, not the template's 9.0
    assert engine.calls  # read through the catalogue reader


def test_without_select_no_catalogue_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = _loaded(tmp_path, "flavor: c8")

    def no_reader(config: object) -> None:
        raise AssertionError("no catalogue read without select:")

    monkeypatch.setattr(cost, "catalogue_reader", no_reader)
    _one_instance(loaded, "c8")
    [item] = cost.cost_report(loaded, 0, 10_000, "provider").items
    assert item.cost == pytest.approx(9.0)
