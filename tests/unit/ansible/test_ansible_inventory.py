"""The inventory built from instance records, Terraform state and the dynamic inventory script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from orchestrator.clients.ansible.inventory import (
    InstanceRecord,
    TemplateBootstrap,
    build_inventory,
    group_name,
    records_from_inventory,
    records_from_tfstate,
    records_from_workdirs,
    write_inventory,
)

ROOT = Path(__file__).resolve().parents[3]


def _state(*instances: tuple[str, str, str, str]) -> dict[str, object]:
    value = {
        key: {"id": iid, "name": name, "address": addr, "launch_time": "2026-11-29T09:00:00Z",
              "tags": {"xce:template": "cpu", "xce:provider": "sim", "xce:op_id": key.rsplit("-", 1)[0]}}
        for key, iid, name, addr in instances
    }
    return {"version": 4, "outputs": {"instances": {"value": value, "type": "object"}}}


def test_hosts_and_groups_per_template_provider_op() -> None:
    recs = [
        InstanceRecord("op-a-000", "i-1", "cpu-1", "10.213.0.2", "cpu", "sim", "op-a"),
        InstanceRecord("op-b-000", "i-2", "gpu-1", "10.213.0.3", "gpu", "aws", "op-b", port=2222),
    ]
    inv = build_inventory(
        recs, {"ansible_user": "root"},
        {"gpu": TemplateBootstrap(("gpu", "burst"), {"tuned": "hpc"}, ("site_cuda",))},
    )
    hosts = inv["all"]["hosts"]
    assert hosts["cpu-1"]["ansible_host"] == "10.213.0.2" and "ansible_port" not in hosts["cpu-1"]
    assert hosts["gpu-1"]["ansible_port"] == 2222 and hosts["gpu-1"]["xce_instance_id"] == "i-2"
    groups = inv["all"]["children"]
    assert set(groups["template_cpu"]["hosts"]) == {"cpu-1"}
    assert set(groups["provider_aws"]["hosts"]) == {"gpu-1"}
    assert set(groups["op_op_a"]["hosts"]) == {"cpu-1"}  # hyphens are not valid in group names
    assert set(groups["burst"]["hosts"]) == {"gpu-1"}
    assert groups["template_gpu"]["vars"] == {"tuned": "hpc", "xce_bootstrap_roles": ["site_cuda"]}
    assert inv["all"]["vars"] == {"ansible_user": "root"}
    assert records_from_inventory(inv) == sorted(recs, key=lambda r: r.name)


def test_group_name_sanitises() -> None:
    assert group_name("op", "20261129-ab.cd") == "op_20261129_ab_cd"


def test_records_from_tfstate_skips_unaddressed() -> None:
    state = _state(("op1-000", "i-1", "h1", "10.0.0.1"), ("op1-001", "i-2", "h2", ""))
    recs = records_from_tfstate(state)
    assert [(r.key, r.name, r.template, r.provider, r.op_id) for r in recs] == [
        ("op1-000", "h1", "cpu", "sim", "op1")
    ]
    assert records_from_tfstate({"version": 4}) == []


def test_dynamic_inventory_script_without_the_orchestrator(tmp_path: Path) -> None:
    wd = tmp_path / "state" / "work" / "demo" / "sim"
    wd.mkdir(parents=True)
    (wd / "terraform.tfstate").write_text(json.dumps(_state(("op1-000", "i-1", "h1", "10.0.0.1"))))
    (tmp_path / "state" / "work" / "demo" / "broken").mkdir()
    (tmp_path / "state" / "work" / "demo" / "broken" / "terraform.tfstate").write_text("{not json")
    write_inventory(tmp_path / "state" / "ansible" / "inventory" / "hosts.json",
                    build_inventory([], {"ansible_user": "admin"}))
    env = {"XCEPROV_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}
    # The system's python3 without the project on sys.path: only the standard library is needed.
    out = subprocess.run(["python3", "-I", str(ROOT / "inventories" / "xceprov_inventory.py"), "--list"],
                         env=env, capture_output=True, text=True, check=True, cwd=tmp_path)
    inv = json.loads(out.stdout)
    assert inv["template_cpu"]["hosts"] == ["h1"]
    assert inv["_meta"]["hostvars"]["h1"]["ansible_host"] == "10.0.0.1"
    assert inv["all"]["vars"] == {"ansible_user": "admin"}
    host = subprocess.run([sys.executable, str(ROOT / "inventories" / "xceprov_inventory.py"), "--host", "h1"],
                          env=env, capture_output=True, text=True, check=True)
    assert json.loads(host.stdout)["xce_instance_id"] == "i-1"
    assert [r.name for r in records_from_workdirs(tmp_path / "state", "demo")] == ["h1"]
