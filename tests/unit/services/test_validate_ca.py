"""``xceprov validate`` and the controller CA: a bad file is a problem, a missing one a warning."""

from __future__ import annotations

from pathlib import Path

from tffake import FakeEngine

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.services.validate import validate_all

SITE = """
cluster: unit
state_dir: {state}
controller: {{ca: {ca}}}
providers: {{sim: {{module: xcesim}}}}
templates: {{cpu: {{providers: {{sim: {{flavor: c8.large, image: debian-12}}}}}}}}
"""


def site(tmp_path: Path, ca: str) -> LoadedConfig:
    return parse_config(SITE.format(state=tmp_path / "state", ca=ca), "site.yaml", tmp_path)


def test_a_ca_file_not_made_yet_is_a_warning_not_a_problem(tmp_path: Path, toolkit: Path) -> None:
    report = validate_all(site(tmp_path, "tls/ca.pem"), toolkit, engine=FakeEngine())
    assert report.problems == []
    missing = f"controller.ca {tmp_path / 'tls/ca.pem'}: file not found yet"
    unlocked = (
        f"terraform/roots/xcesim: no provider lock ({tmp_path / 'state/terraform/locks/xcesim.terraform.lock.hcl'}), "
        "so provider versions may move; xceprov terraform lock pins them"
    )
    assert report.warnings == [f"{missing}; plan previews without it, apply needs it", unlocked]
    assert "template cpu on provider sim" in report.checked


def test_a_ca_file_holding_a_key_is_a_problem_and_templates_are_still_checked(tmp_path: Path, toolkit: Path) -> None:
    (tmp_path / "ca.pem").write_text("-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n")
    report = validate_all(site(tmp_path, "ca.pem"), toolkit, engine=FakeEngine())
    assert report.problems == [
        f"controller.ca {tmp_path / 'ca.pem'}: holds a PRIVATE KEY block; only CERTIFICATE blocks may go to "
        "provisioned hosts"
    ]
    assert "template cpu on provider sim" in report.checked
