"""Every key renders on its offering: flavor, zone, subnet, the xce:offering tag, the node
manager's slots; a site template cannot change the tag; an unknown offering is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.instances import InstanceSpec
from orchestrator.model.offerings import Offering, Placement
from orchestrator.render.instances import RenderRequest, render_op, renderer_for

BUILTIN = Path(__file__).resolve().parents[3] / "templates"
OP = "op-6b0b0000-abcdef"

SITE = """
cluster: site1
state_dir: state
controller: {addresses: ["ctl1:7441"], ca: system}
providers:
  sim: {module: xcesim, settings: {store: "{{ sim_state_dir }}/cloud.sqlite"}}
templates:
  cpu:
    xce: {slots: 8}
    providers:
      sim:
        image: debian-12
        cost_per_hour: 0.4
        offerings:
          - {flavor: c8.large}
          - {flavor: c16.large, zone: zone-b, cost_per_hour: 0.7, slots: 16}
          - {flavor: c8.large, subnet: net-2, name: c8-spare}
  wide:
    providers:
      sim: {image: debian-12, select: {cpus: {min: 4}}}
"""


def config(extra: str = "") -> Config:
    return parse_config(SITE + extra, "site.yaml", Path("/srv/site")).config


def render(cfg: Config, request: RenderRequest) -> dict[str, InstanceSpec]:
    return render_op(cfg, renderer_for(cfg, BUILTIN), request)


def test_each_key_renders_on_its_placed_offering() -> None:
    cfg = config()
    placements = (Placement("c16.large@zone-b", 2), Placement("c8-spare", 1))
    specs = render(cfg, RenderRequest("sim", "cpu", OP, 4, placements=placements))
    by_key = [(s.flavor, s.zone, s.subnet, s.tags[owner.OFFERING]) for s in specs.values()]
    assert by_key == [
        ("c16.large", "zone-b", None, "c16.large@zone-b"),
        ("c16.large", "zone-b", None, "c16.large@zone-b"),
        ("c8.large", None, "net-2", "c8-spare"),
        ("c8.large", None, None, "c8.large"),  # past the placements: the default (first listed)
    ]
    *_, last = ordered = list(specs.values())
    first = ordered[0]
    assert first.terraform_value()["zone"] == "zone-b" and "zone" not in last.terraform_value()
    assert _node_manager(first)["xce"]["slots"] == 16  # the offering's slots
    assert _node_manager(last)["xce"]["slots"] == 8


def test_without_placements_every_key_is_on_the_default_offering() -> None:
    specs = render(config(), RenderRequest("sim", "cpu", OP, 2))
    assert {(s.flavor, s.zone, s.tags[owner.OFFERING]) for s in specs.values()} == {("c8.large", None, "c8.large")}


def test_site_templates_see_the_offering_in_cloud(tmp_path: Path) -> None:
    (tmp_path / "hostname.j2").write_text(
        "{{ cluster }}-{{ cloud.offering | replace('@', '-') | replace('.', '-') }}-{{ cloud.slots }}-{{ index }}"
    )
    cfg = config(f"template_dirs: [{json.dumps(str(tmp_path))}]\n")
    specs = render(cfg, RenderRequest("sim", "cpu", OP, 1, placements=(Placement("c16.large@zone-b", 1),)))
    assert [s.name for s in specs.values()] == ["site1-c16-large-zone-b-16-0"]


def test_a_site_entry_without_zone_gets_the_offerings(tmp_path: Path) -> None:
    (tmp_path / "instance.json.j2").write_text(
        '{"name": {{ name|tojson }}, "template": "cpu", "flavor": {{ cloud.flavor|tojson }}, "image": "i",'
        ' "tags": {{ tags|tojson }}}'
    )
    cfg = config(f"template_dirs: [{json.dumps(str(tmp_path))}]\n")
    one = render(cfg, RenderRequest("sim", "cpu", OP, 2, placements=(Placement("c16.large@zone-b", 1),)))
    assert [(s.flavor, s.zone) for s in one.values()] == [("c16.large", "zone-b"), ("c8.large", None)]


def test_a_site_template_cannot_change_the_offering_tag(tmp_path: Path) -> None:
    (tmp_path / "instance.json.j2").write_text(
        '{"name": {{ name|tojson }}, "template": "cpu", "flavor": "f", "image": "i",'
        ' "tags": {{ dict(tags, **{"xce:offering": "cheap"})|tojson }}}'
    )
    cfg = config(f"template_dirs: [{json.dumps(str(tmp_path))}]\n")
    with pytest.raises(ConfigError) as caught:
        render(cfg, RenderRequest("sim", "cpu", OP, 1))
    assert caught.value.problems == ["instance.json.j2: rendered entry lost owner tag xce:offering='c8.large'"]


def test_an_unknown_offering_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        render(config(), RenderRequest("sim", "cpu", OP, 1, placements=(Placement("m5.huge", 1),)))
    assert caught.value.problems == [
        "template cpu on provider sim: no offering 'm5.huge' (it has c16.large@zone-b, c8-spare, c8.large)"
    ]


def test_select_renders_the_offerings_handed_over_from_the_catalogue() -> None:
    cfg = config()
    found = {
        "g4.xl@zone-a": Offering("g4.xl@zone-a", "g4.xl", "zone-a", None, 1.2, 4, "catalogue"),
        "c4.large": Offering("c4.large", "c4.large", None, None, 0.2, 1, "catalogue"),
    }
    specs = render(cfg, RenderRequest("sim", "wide", OP, 2, placements=(Placement("c4.large", 1),), offerings=found))
    assert [(s.flavor, s.zone) for s in specs.values()] == [("c4.large", None), ("g4.xl", "zone-a")]
    with pytest.raises(ConfigError) as caught:
        render(cfg, RenderRequest("sim", "wide", OP, 1))
    assert caught.value.problems == [
        "template wide on provider sim: selects flavors from the provider's catalogue, "
        "and no offering was resolved from it"
    ]


def _node_manager(spec: InstanceSpec) -> dict:
    data = yaml.safe_load(spec.user_data)
    [entry] = [f for f in data["write_files"] if f["path"].endswith("node-manager.json")]
    return json.loads(entry["content"])
