"""Host templates render into instance entries and cloud-init; hostile values stay literal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.instances import OP_ID_PATTERN, OP_ID_RANDOM_BITS, new_op_id
from orchestrator.render.instances import RenderRequest, render_op, render_settings, renderer_for

BUILTIN = Path(__file__).resolve().parents[3] / "templates"
HOSTILE = 'a"b ${var.x} %{ if true }x%{ endif }\nresource "x" "y" {}\\'

SITE = """
cluster: site1
state_dir: state
controller: {addresses: ["ctl1:7441", "ctl2:7441"], ca: system}
providers:
  sim: {module: xcesim, tags: {cost_center: "42"}, settings: {store: "{{ sim_state_dir }}/cloud.sqlite"}}
templates:
  cpu:
    xce: {slots: 8, host_groups: [burst]}
    tags: {team: hpc}
    providers:
      sim: {flavor: c8.large, image: debian-12, disk_gb: 40}
"""


def config(text: str = SITE, base: Path = Path("/srv/site")) -> Config:
    return parse_config(text, "site.yaml", base).config


def test_instance_entries_carry_owner_and_site_tags() -> None:
    cfg = config()
    specs = render_op(
        cfg, renderer_for(cfg, BUILTIN), RenderRequest("sim", "cpu", "op-6b0b0000-abcdef", 2, epoch="7.3")
    )
    assert list(specs) == ["op-6b0b0000-abcdef-000", "op-6b0b0000-abcdef-001"]
    spec = specs["op-6b0b0000-abcdef-001"]
    assert spec.tags == {
        "cost_center": "42",
        "team": "hpc",
        owner.CLUSTER: "site1",
        owner.PROVIDER: "sim",
        owner.OP_ID: "op-6b0b0000-abcdef",
        owner.EPOCH: "7.3",
        owner.TEMPLATE: "cpu",
        owner.OFFERING: "c8.large",  # a one-flavor template: its one offering, named after the flavor
    }
    assert spec.flavor == "c8.large" and spec.disk_gb == 40
    assert spec.name == "site1-cpu-6b0b0000-abcdef-1"  # the op's second and random part, the index


def test_cloud_init_writes_node_manager_config_with_worker_role() -> None:
    cfg = config()
    spec = next(
        iter(render_op(cfg, renderer_for(cfg, BUILTIN), RenderRequest("sim", "cpu", "op-6b0b0000-abcdef", 1)).values())
    )
    assert spec.user_data.startswith("#cloud-config\n")
    files = {f["path"]: f for f in yaml.safe_load(spec.user_data)["write_files"]}
    nm = json.loads(files["/etc/xce/node-manager.json"]["content"])
    assert nm["roles"] == ["worker"]
    assert nm["controller"]["addresses"] == ["ctl1:7441", "ctl2:7441"]
    assert nm["template"] == "cpu" and nm["host_name"] == spec.name
    assert nm["xce"]["slots"] == 8


def test_hostile_values_stay_literal() -> None:
    text = SITE.replace("tags: {team: hpc}", f"tags: {{team: {json.dumps(HOSTILE)}}}")
    text = text.replace("image: debian-12", f"image: {json.dumps(HOSTILE)}")
    cfg = config(text)
    spec = next(
        iter(render_op(cfg, renderer_for(cfg, BUILTIN), RenderRequest("sim", "cpu", "op-6b0b0000-abcdef", 1)).values())
    )
    assert spec.tags["team"] == HOSTILE
    assert spec.image == HOSTILE


def test_site_directory_overrides_per_template_first(tmp_path: Path) -> None:
    site = tmp_path / "site-templates"
    (site / "cpu").mkdir(parents=True)
    (site / "hostname.j2").write_text("generic-{{ index }}")
    (site / "cpu" / "hostname.j2").write_text("{{ cluster }}-fast-{{ index }}")
    cfg = config(SITE + f"template_dirs: [{json.dumps(str(site))}]\n")
    spec = next(
        iter(render_op(cfg, renderer_for(cfg, BUILTIN), RenderRequest("sim", "cpu", "op-6b0b0000-abcdef", 1)).values())
    )
    assert spec.name == "site1-fast-0"


def test_host_names_of_ops_made_in_the_same_second_differ_by_48_random_bits() -> None:
    """The name carries the op id's creation second and its 48 random bits (docs/architecture.md,
    "Host names"): it was 24 bits, a 3 % chance of two equal names in a thousand ops."""
    cfg = config()
    renderer = renderer_for(cfg, BUILTIN)
    ops = [new_op_id(now=1_700_000_000) for _ in range(200)]
    assert all(OP_ID_PATTERN.fullmatch(op) and len(op.rsplit("-", 1)[1]) * 4 == OP_ID_RANDOM_BITS for op in ops)
    names = {spec.name for op in ops for spec in render_op(cfg, renderer, RenderRequest("sim", "cpu", op, 1)).values()}
    assert len(names) == len(ops)
    assert all(
        name.startswith("site1-cpu-6553f100-") and len(name) == len("site1-cpu-6553f100-") + 12 + 2 for name in names
    )


def test_a_name_longer_than_a_host_name_label_is_refused_before_anything_is_made() -> None:
    long_template = "g" * 40
    cfg = config(SITE.replace("  cpu:\n", f"  {long_template}:\n"))
    with pytest.raises(ConfigError, match=r"hostname\.j2: rendered name '.*' has a label longer than 63"):
        render_op(cfg, renderer_for(cfg, BUILTIN), RenderRequest("sim", long_template, new_op_id(), 1))


def test_undefined_variable_is_an_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "hostname.j2").write_text("{{ cluster }}-{{ no_such_thing }}")
    cfg = config(SITE + f"template_dirs: [{json.dumps(str(tmp_path))}]\n")
    with pytest.raises(ConfigError, match=r"hostname\.j2.*'no_such_thing' is undefined"):
        render_op(cfg, renderer_for(cfg, BUILTIN), RenderRequest("sim", "cpu", "op-6b0b0000-abcdef", 1))


def test_sandbox_refuses_python_internals(tmp_path: Path) -> None:
    (tmp_path / "hostname.j2").write_text("{{ cluster.__class__.__mro__[1].__subclasses__() }}")
    cfg = config(SITE + f"template_dirs: [{json.dumps(str(tmp_path))}]\n")
    with pytest.raises(ConfigError, match=r"hostname\.j2"):
        render_op(cfg, renderer_for(cfg, BUILTIN), RenderRequest("sim", "cpu", "op-6b0b0000-abcdef", 1))


def test_site_template_cannot_drop_owner_tags(tmp_path: Path) -> None:
    (tmp_path / "instance.json.j2").write_text(
        '{"name": {{ name|tojson }}, "template": "cpu", "flavor": "f", "image": "i", "tags": {"team": "x"}}'
    )
    cfg = config(SITE + f"template_dirs: [{json.dumps(str(tmp_path))}]\n")
    with pytest.raises(ConfigError, match="lost owner tag xce:cluster"):
        render_op(cfg, renderer_for(cfg, BUILTIN), RenderRequest("sim", "cpu", "op-6b0b0000-abcdef", 1))


def test_provider_settings_render_paths() -> None:
    assert render_settings(config(), "sim") == {"store": "/srv/site/state/sim/cloud.sqlite"}
