"""``xceprov plan`` says which offering each instance is on, as what, where, at what cost; a
saved plan applies every key on the offering it showed."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from tffake import ROOT, SITE, FakeEngine, unit_ops

from orchestrator.cli.plan import print_plan
from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.model import tags as owner
from orchestrator.model.offerings import Placement
from orchestrator.services.apply import apply_bundle, runs
from orchestrator.services.plan import plan_burst
from orchestrator.workspace.workdir import ProviderWorkdir

WIDE = """
  wide:
    providers:
      sim:
        image: debian-12
        cost_per_hour: 0.5
        offerings:
          - {{flavor: c16.large, zone: zone-b, cost_per_hour: 0.8, slots: 2}}
          - {{flavor: c8.large}}
"""


@pytest.fixture
def offered(tmp_path: Path) -> LoadedConfig:
    text = (SITE + WIDE).format(cluster="unit", state=tmp_path / "state")
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


def test_plan_json_shows_each_instances_offering_flavor_zone_and_cost(offered: LoadedConfig) -> None:
    plan = plan_burst(offered, {"wide": 2, "cpu": 1}, toolkit_root=ROOT, engine=FakeEngine())
    document = json.loads(json.dumps(plan.to_json()))
    [sim] = document["providers"]
    shown = sorted((i["template"], i["offering"], i["flavor"], i["zone"], i["cost_per_hour"]) for i in sim["instances"])
    assert shown == [
        ("cpu", "c8.large", "c8.large", None, 0.5),
        ("wide", "c16.large@zone-b", "c16.large", "zone-b", 0.8),
        ("wide", "c16.large@zone-b", "c16.large", "zone-b", 0.8),
    ]
    assert sim["cost_by_offering"] == {"cpu": {"c8.large": 0.5}, "wide": {"c16.large@zone-b": 1.6}}
    assert sim["cost_by_template"] == {"cpu": 0.5, "wide": 1.6}
    assert document["cost_per_hour"] == pytest.approx(2.1)
    assert all(i["tags"][owner.OFFERING] == i["offering"] for i in sim["instances"])


def test_plan_text_has_a_line_per_offering(offered: LoadedConfig) -> None:
    plan = plan_burst(offered, {"wide": 2}, toolkit_root=ROOT, engine=FakeEngine())
    out = io.StringIO()
    print_plan(plan, Console(file=out, width=200))
    assert "offering sim/wide c16.large@zone-b: 2 × c16.large zone zone-b, 0.80 each, 1.60 per hour" in out.getvalue()
    assert "added cost: 1.60 per hour" in out.getvalue()


def test_a_saved_plan_applies_every_key_on_the_offering_it_showed(offered: LoadedConfig, tmp_path: Path) -> None:
    engine = FakeEngine()
    plan_burst(offered, {"wide": 2}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)
    apply_bundle(offered, tmp_path / "b", ROOT, wired=unit_ops(offered, engine))
    held = ProviderWorkdir(offered.config, "sim", ROOT).desired.read()
    assert (
        sorted((s.flavor, s.zone, s.tags[owner.OFFERING]) for s in held.values())
        == [("c16.large", "zone-b", "c16.large@zone-b")] * 2
    )


def test_keys_offerings_become_placements_in_key_order() -> None:
    assert runs(["a", "a", "b", "a"]) == (Placement("a", 2), Placement("b", 1), Placement("a", 1))
    assert runs(["a", ""]) == ()  # a key planned before offerings: the default offering for all


CHEAP = """
  cheap:
    providers:
      sim:
        image: debian-12
        cost_per_hour: 0.5
        offerings:
          - {{flavor: c8.large}}
          - {{flavor: c4.small, zone: zone-c, cost_per_hour: 0.2}}
"""


def test_the_plan_renders_on_the_offerings_the_policy_placed_the_op_on(tmp_path: Path) -> None:
    text = (SITE + CHEAP).format(cluster="unit", state=tmp_path / "state")
    loaded = parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)
    engine = FakeEngine()
    plan = plan_burst(loaded, {"cheap": 2}, out=tmp_path / "b", toolkit_root=ROOT, engine=engine)
    [sim] = plan.to_json()["providers"]
    # The cheapest per slot, not the first listed (the default).
    assert [op["placements"] for op in sim["ops"]] == [[{"offering": "c4.small@zone-c", "count": 2}]]
    assert {(i["offering"], i["zone"], i["cost_per_hour"]) for i in sim["instances"]} == {
        ("c4.small@zone-c", "zone-c", 0.2)
    }
    apply_bundle(loaded, tmp_path / "b", ROOT, wired=unit_ops(loaded, engine))
    held = ProviderWorkdir(loaded.config, "sim", ROOT).desired.read()
    assert {(s.flavor, s.zone) for s in held.values()} == {("c4.small", "zone-c")}
