"""``xceprov image``: the refusals a user meets before anything is read or changed (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli

SITE = """
cluster: c1
state_dir: {state}
controller: {{ca: system}}
providers:
  os: {{module: openstack, settings: {{cloud: site}}}}
templates:
  cpu:
    providers:
      os: {{flavor: m1.large, image: debian-12}}
"""


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["image", "bake", "cpu", "--provider", "os"],
            "xceprov: provider os: module openstack cannot bake images: the Terraform OpenStack provider has no "
            "resource that makes an image from a server",
        ),
        (["image", "bake", "gpu", "--provider", "os"], "xceprov: template 'gpu': no such template in"),
        (["image", "bake", "cpu", "--provider", "ec2"], "xceprov: --provider ec2: no such provider in"),
        (["image", "list", "--provider", "os"], "xceprov: provider os: module openstack cannot bake images"),
        (["image", "delete", "img-1", "--provider", "os"], "xceprov: provider os: module openstack cannot bake"),
    ],
)
def test_an_impossible_image_command_is_refused_in_one_line(tmp_path: Path, args: list[str], line: str) -> None:
    config = tmp_path / "xceprov.yaml"
    config.write_text(SITE.format(state=tmp_path / "state"))
    result = CliRunner().invoke(cli, ["--config", str(config), *args])
    assert result.exit_code == 2, result.output
    [printed] = [x for x in result.output.splitlines() if x.strip()]
    assert printed.startswith(line), printed
    assert not (tmp_path / "state" / "work").exists()  # nothing was built, read or changed
