"""The bootstrap service's selection, inventory writing and site hooks (no Ansible run)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.clients.ansible.inventory import InstanceRecord
from orchestrator.configfile import parse_config
from orchestrator.errors import UsageError
from orchestrator.services.bootstrap import hook_vars, select, write_operator_inventory

RECS = [
    InstanceRecord("op1-000", "i-1", "cpu-1", "10.0.0.1", "cpu", "sim", "op1"),
    InstanceRecord("op1-001", "i-2", "cpu-2", "10.0.0.2", "cpu", "sim", "op1"),
    InstanceRecord("op2-000", "i-3", "gpu-1", "10.0.0.3", "gpu", "sim", "op2"),
]


def _config(tmp_path: Path, site: Path | None) -> object:
    text = f"""
cluster: t
state_dir: {tmp_path / "state"}
controller: {{addresses: ["127.0.0.1:7441"], worker_addresses: ["10.213.0.1:7441"], ca: system}}
ansible: {{ssh_user: admin, {"site_dir: " + str(site) if site else ""}}}
providers: {{sim: {{module: xcesim}}}}
templates:
  cpu: {{providers: {{sim: {{flavor: a, image: b}}}}, bootstrap: {{roles: [site_motd], vars: {{k: v}}}}}}
  gpu: {{providers: {{sim: {{flavor: a, image: b}}}}}}
"""
    return parse_config(text, "t.yaml", tmp_path).config


def test_select_by_op_name_key_id_address() -> None:
    assert [r.name for r in select(RECS, "op1", ())] == ["cpu-1", "cpu-2"]
    assert [r.name for r in select(RECS, None, ["cpu-2", "op2-000", "i-1", "10.0.0.1"])] == ["cpu-2", "gpu-1", "cpu-1"]
    assert len(select(RECS, None, ())) == 3


def test_select_unknown_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"unknown host.*nope.*known: cpu-1"):
        select(RECS, None, ["nope"])
    with pytest.raises(UsageError, match=r"op 'op9'.*known ops: op1, op2"):
        select(RECS, "op9", ())


def test_operator_inventory_links_site_group_vars(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "group_vars").mkdir(parents=True)
    (site / "pre-bootstrap.yml").write_text("[]\n")
    config = _config(tmp_path, site)
    path = write_operator_inventory(config, RECS, tmp_path / "kh")  # type: ignore[arg-type]
    inv = json.loads(path.read_text())
    assert inv["all"]["vars"]["ansible_user"] == "admin"
    assert inv["all"]["vars"]["xce_node_manager_controller_addresses"] == ["10.213.0.1:7441"]
    assert "UserKnownHostsFile=" in inv["all"]["vars"]["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in inv["all"]["vars"]["ansible_ssh_common_args"]
    assert inv["all"]["children"]["template_cpu"]["vars"]["xce_bootstrap_roles"] == ["site_motd"]
    assert (path.parent / "group_vars").resolve() == (site / "group_vars").resolve()
    assert hook_vars(config) == {"xce_bootstrap_pre_playbook": str((site / "pre-bootstrap.yml").resolve())}  # type: ignore[arg-type]
