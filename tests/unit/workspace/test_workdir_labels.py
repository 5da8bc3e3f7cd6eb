"""A provider whose module maps the owner tags to its cloud's labels: what Terraform gets and what is read back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.modules import MODULES
from orchestrator.model.offerings import Placement
from orchestrator.render.instances import RenderRequest, render_op, renderer_for
from orchestrator.services.apply import BundleOp, bundle_ops
from orchestrator.workspace.terraform import instances_output
from orchestrator.workspace.workdir import ProviderWorkdir

ROOT = Path(__file__).resolve().parents[3]
KEYS = {key: key.replace(":", "_") for key in owner.TOOLKIT_TAGS}
OP = "op-6b0b0000-abcdef"

SITE = """
cluster: site1
state_dir: {state}
controller: {{addresses: ["ctl1:7441"], ca: system}}
providers:
  sim: {{module: xcesim, tags: {{cost_center: "42"}}, settings: {{store: "{{{{ sim_state_dir }}}}/cloud.sqlite"}}}}
templates:
  cpu:
    tags: {{team: {team}}}
    providers:
      sim: {{flavor: c8.large, image: debian-12}}
"""


@pytest.fixture
def labelled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulated module's entry as a cloud whose labels take [a-z0-9_-] only."""
    entry = dataclasses.replace(
        MODULES["xcesim"], tag_keys=KEYS, tag_chars="[a-z0-9_-]", tag_escape="_", tag_max_length=63
    )
    monkeypatch.setitem(MODULES, "xcesim", entry)


def _config(tmp_path: Path, team: str = "hpc") -> Config:
    text = SITE.format(state=json.dumps(str(tmp_path / "state")), team=json.dumps(team))
    return parse_config(text, "site.yaml", tmp_path).config


@pytest.mark.usefixtures("labelled")
def test_terraform_gets_labels_and_every_reader_gets_the_owner_tags_back(tmp_path: Path) -> None:
    cfg = _config(tmp_path)
    specs = render_op(cfg, renderer_for(cfg, ROOT / "templates"), RenderRequest("sim", "cpu", OP, 1, epoch="7.3"))
    workdir = ProviderWorkdir(cfg, "sim", ROOT)
    variables = workdir.variables(specs, {"store": "x"})
    key = f"{OP}-000"
    assert variables["common_tags"] == {"xce_cluster": "site1", "xce_provider": "sim"}
    assert variables["instances"][key]["tags"] == {
        "cost_center": "42",
        "team": "hpc",
        "xce_cluster": "site1",
        "xce_provider": "sim",
        "xce_op_id": OP,
        "xce_epoch": "_7_2e3",
        "xce_template": "cpu",
        "xce_offering": "_c8_2elarge",  # c8.large, encoded: read back as it was
    }
    # The desired set is that document; read back, the rendered entries exactly.
    workdir.path.mkdir(parents=True)
    workdir.desired.write(variables)
    assert workdir.desired.read() == specs
    # The state's instances output and a saved plan's variables are read back the same way.
    outputs = {"instances": {key: {"id": "i-1", "name": "n", "tags": variables["instances"][key]["tags"]}}}
    assert instances_output(outputs, workdir.labels)[key]["tags"] == specs[key].tags
    shown = {
        "variables": {"instances": {"value": variables["instances"]}},
        "resource_changes": [{"index": key, "change": {"actions": ["create"]}}],
    }
    # The offering comes back through the labels too: apply re-creates the key on it.
    placed = (Placement("c8.large", 1),)
    assert bundle_ops("sim", shown, Path("b"), frozenset(), workdir.labels) == [BundleOp("sim", OP, "cpu", 1, placed)]


@pytest.mark.usefixtures("labelled")
def test_a_site_tag_the_labels_cannot_carry_is_refused_in_one_line_naming_template_key_and_value(
    tmp_path: Path,
) -> None:
    cfg = _config(tmp_path, team="HPC Team")
    with pytest.raises(ConfigError) as caught:
        render_op(cfg, renderer_for(cfg, ROOT / "templates"), RenderRequest("sim", "cpu", OP, 1))
    assert str(caught.value) == (
        "instance.json.j2: template cpu on provider sim (module xcesim): "
        "tag team='HPC Team': the labels take only characters of [a-z0-9_-]"
    )
