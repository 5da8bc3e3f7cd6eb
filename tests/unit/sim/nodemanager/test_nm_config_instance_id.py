"""The node manager's instance id: the file's, else cloud-init's record, else the instance key.

What a user would notice: a first-boot host (whose user data is rendered before the cloud gives
the instance its id) joins the controller under the id the cloud gave it, so the controller
binds its token to that instance (docs/protocol.md); a record that is no plain id is not believed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.sim.nodemanager import config as nmconfig

BASE = {
    "roles": ["worker"],
    "controller": {"addresses": ["10.0.0.1:7441"], "ca_file": "/etc/xce/ca.pem"},
    "template": "cpu",
    "host_name": "cpu-1",
    "instance_key": "op-1-000",
}


def load(tmp_path: Path, document: dict[str, object], record: str | None) -> nmconfig.NodeConfig:
    path = tmp_path / "node-manager.json"
    path.write_text(json.dumps(document))
    cloud = tmp_path / "instance-id"
    if record is not None:
        cloud.write_text(record)
    return nmconfig.parse(path.read_text(), str(path), nmconfig.cloud_instance_id(cloud))


def test_a_first_boot_host_joins_under_the_id_cloud_init_recorded(tmp_path: Path) -> None:
    assert load(tmp_path, BASE, "i-0123456789ab\n").instance_id == "i-0123456789ab"


def test_the_id_the_bootstrap_wrote_wins_over_cloud_init_s(tmp_path: Path) -> None:
    assert load(tmp_path, {**BASE, "instance_id": "i-1"}, "i-2\n").instance_id == "i-1"


@pytest.mark.parametrize("record", [None, "", "i-1; rm -rf /", "x" * 200, "ı-1"])
def test_without_a_plain_record_the_instance_key_stands_in(tmp_path: Path, record: str | None) -> None:
    assert load(tmp_path, BASE, record).instance_id == "op-1-000"
