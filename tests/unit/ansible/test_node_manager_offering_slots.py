"""A pushed host on an offering with other slots than its template's gets them: the inventory
names them per host and the node manager role writes them into its configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.clients.ansible.inventory import InstanceRecord
from orchestrator.configfile import parse_config
from orchestrator.services.bootstrap import inventory_document

ROOT = Path(__file__).resolve().parents[3]
SITE = """
cluster: site1
controller: {ca: system}
providers:
  sim: {module: xcesim}
templates:
  wide:
    xce: {slots: 8}
    providers:
      sim:
        image: baked
        offerings:
          - {flavor: c8.large}
          - {flavor: c16.large, slots: 16}
"""


def test_the_inventory_names_an_offerings_slots_per_host(tmp_path: Path) -> None:
    config = parse_config(SITE, "site.yaml", tmp_path).config
    records = [
        InstanceRecord("op-a-000", "i-1", "h1", "10.0.0.1", "wide", "sim", "op-a", offering="c16.large"),
        InstanceRecord("op-a-001", "i-2", "h2", "10.0.0.2", "wide", "sim", "op-a", offering="c8.large"),
        InstanceRecord("op-b-000", "i-3", "h3", "10.0.0.3", "wide", "sim", "op-b"),  # made before offerings
    ]
    hosts = inventory_document(config, records, tmp_path / "known_hosts")["all"]["hosts"]
    assert hosts["h1"]["xce_offering"] == "c16.large" and hosts["h1"]["xce_offering_slots"] == 16
    assert "xce_offering_slots" not in hosts["h2"] and "xce_offering" not in hosts["h3"]


@pytest.mark.parametrize(("slots", "written"), [(16, 16), (0, 8)])
def test_the_role_writes_the_offerings_slots(slots: int, written: int) -> None:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    text = (ROOT / "ansible/roles/xce_node_manager/templates/node-manager.json.j2").read_text()
    variables = {
        "xce_node_manager_roles": ["worker"],
        "xce_node_manager_controller_addresses": ["ctl:7441"],
        "xce_node_manager_ca_path": "/etc/xce/ca.pem",
        "xce_node_manager_server_name": "",
        "xce_node_manager_template": "wide",
        "xce_node_manager_host_name": "h1",
        "xce_node_manager_instance_id": "i-1",
        "xce_node_manager_instance_key": "op-a-000",
        "xce_node_manager_op_id": "op-a",
        "xce_node_manager_xce": {"slots": 8, "type": "X86_64"},
        "xce_node_manager_join_token": "",
        "xce_node_manager_join_tokens_file": "",
        "xce_node_manager_extra_config": {},
        "xce_node_manager_slots": slots,
    }
    out = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(text))
    assert json.loads(out)["xce"] == {"slots": written, "type": "X86_64"}
