"""The inventory built from instance records and Terraform state, and the collection's inventory plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.clients.ansible.inventory import (
    InstanceRecord,
    TemplateBootstrap,
    build_inventory,
    group_name,
    only_hosts,
    read_inventory,
    records_from_inventory,
    records_from_tfstate,
    records_from_workdirs,
    refusal,
    valid_host_name,
    write_inventory,
)

ROOT = Path(__file__).resolve().parents[3]


def _state(*instances: tuple[str, str, str, str]) -> dict[str, object]:
    value = {
        key: {
            "id": iid,
            "name": name,
            "address": addr,
            "launch_time": "2026-11-29T09:00:00Z",
            "tags": {"xce:template": "cpu", "xce:provider": "sim", "xce:op_id": key.rsplit("-", 1)[0]},
        }
        for key, iid, name, addr in instances
    }
    return {"version": 4, "outputs": {"instances": {"value": value, "type": "object"}}}


def test_hosts_and_groups_per_template_provider_op() -> None:
    recs = [
        InstanceRecord("op-a-000", "i-1", "cpu-1", "10.213.0.2", "cpu", "sim", "op-a"),
        InstanceRecord("op-b-000", "i-2", "gpu-1", "10.213.0.3", "gpu", "aws", "op-b", port=2222),
    ]
    inv = build_inventory(
        recs,
        {"ansible_user": "root"},
        {"gpu": TemplateBootstrap(("gpu", "burst"), {"tuned": "hpc"}, ("site_cuda",), {"xce_node_manager_xce": {}})},
    )
    hosts = inv["all"]["hosts"]
    assert hosts["cpu-1"]["ansible_host"] == "10.213.0.2" and "ansible_port" not in hosts["cpu-1"]
    assert hosts["gpu-1"]["ansible_port"] == 2222 and hosts["gpu-1"]["xce_instance_id"] == "i-2"
    groups = inv["all"]["children"]
    assert set(groups["template_cpu"]["hosts"]) == {"cpu-1"}
    assert set(groups["provider_aws"]["hosts"]) == {"gpu-1"}
    assert set(groups["op_op_a"]["hosts"]) == {"cpu-1"}  # hyphens are not valid in group names
    assert set(groups["burst"]["hosts"]) == {"gpu-1"}
    # The toolkit's data and the site's bootstrap.vars are kept apart (the plugin marks only data unsafe).
    assert groups["template_gpu"]["vars"] == {"xce_node_manager_xce": {}, "xce_bootstrap_roles": ["site_cuda"]}
    assert groups["template_gpu"]["site_vars"] == {"tuned": "hpc"}
    assert inv["all"]["vars"] == {"ansible_user": "root"}
    assert records_from_inventory(inv) == sorted(recs, key=lambda r: r.name)


def test_group_name_sanitises() -> None:
    assert group_name("op", "20261129-ab.cd") == "op_20261129_ab_cd"


def test_records_from_tfstate_skips_unaddressed() -> None:
    state = _state(("op1-000", "i-1", "h1", "10.0.0.1"), ("op1-001", "i-2", "h2", ""))
    recs = records_from_tfstate(state)
    assert [(r.key, r.name, r.template, r.provider, r.op_id) for r in recs] == [("op1-000", "h1", "cpu", "sim", "op1")]
    assert records_from_tfstate({"version": 4}) == []


def test_records_from_tfstate_skip_instances_waiting_stopped_in_a_warm_pool() -> None:
    state = _state(("op1-000", "i-1", "h1", "10.0.0.1"), ("op1-001", "i-2", "h2", "10.0.0.2"))
    state["outputs"]["instances"]["value"]["op1-001"]["tags"]["xce:pool"] = "warm"  # type: ignore[index]
    assert [r.key for r in records_from_tfstate(state)] == ["op1-000"]


def test_a_hostile_address_in_terraform_state_is_refused_where_it_enters() -> None:
    """The record stays (the host gets a failed result naming the value), its address does not:
    nothing of it reaches an inventory."""
    state = _state(("op1-000", "i-1", "h1", "10.0.0.1"), ("op1-001", "i-2", "h2", "10.0.0.2\n* ssh-ed25519 AAAA"))
    good, bad = records_from_tfstate(state)
    assert (good.address, good.refused) == ("10.0.0.1", "")
    assert bad.address == "" and "'10.0.0.2\\n* ssh-ed25519 AAAA'" in bad.refused
    assert refusal(bad) == f"{bad.refused}; not bootstrapped" and refusal(good) is None
    assert list(build_inventory([good, bad])["all"]["hosts"]) == ["h1"]


def test_a_hand_edited_inventory_address_is_refused_too() -> None:
    doc = {
        "all": {
            "hosts": {
                "h1": {"ansible_host": "10.0.0.1,*", "ansible_port": 22},
                "h2": {"ansible_host": "10.0.0.2", "ansible_port": "22 -oProxyCommand=x"},
                "h3": {"ansible_host": "10.0.0.3", "ansible_port": 2200},
            }
        }
    }
    h1, h2, h3 = records_from_inventory(doc)
    assert h1.address == "" and refusal(h1) is not None
    assert h2.address == "" and "port" in (refusal(h2) or "")
    assert (h3.address, h3.port, refusal(h3)) == ("10.0.0.3", 2200, None)


@pytest.mark.parametrize("name", ["cpu-1", "a", "node-7.burst.example", "A1-b2", "x" * 63])
def test_valid_host_names(name: str) -> None:
    assert valid_host_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "web*",
        "a,b",
        "!a",
        "a&b",
        "h[1:3]",
        "~h.*",
        "-a",
        "a-",
        "a..b",
        "a b",
        "{{ x }}",
        "x" * 64,
        "a.b." + "c" * 250,
    ],
)
def test_invalid_host_names_are_left_out(name: str) -> None:
    assert not valid_host_name(name)
    inv = build_inventory([InstanceRecord("op-000", "i-1", name, "10.0.0.1", "cpu", "sim", "op")])
    assert inv["all"]["hosts"] == {}


def test_only_hosts_keeps_exactly_the_named_hosts() -> None:
    recs = [InstanceRecord(f"op-00{i}", f"i-{i}", f"cpu-{i}", f"10.0.0.{i}", "cpu", "sim", "op") for i in (1, 2, 3)]
    inv = build_inventory(recs, {"ansible_user": "root"}, {"cpu": TemplateBootstrap(vars={"k": "v"})})
    run = only_hosts(inv, ["cpu-2", "cpu-*"])
    assert list(run["all"]["hosts"]) == ["cpu-2"]
    assert run["all"]["children"]["template_cpu"] == {"hosts": {"cpu-2": None}, "site_vars": {"k": "v"}}
    assert run["all"]["vars"] == {"ansible_user": "root"}
    assert only_hosts(inv, [])["all"] == {"hosts": {}, "children": {}, "vars": {"ansible_user": "root"}}


def test_written_inventory_is_private_and_reads_back(tmp_path: Path) -> None:
    inv = build_inventory([InstanceRecord("op-000", "i-1", "h1", "10.0.0.1", "cpu", "sim", "op")])
    path = write_inventory(tmp_path / "inv" / "xceprov.yml", inv)
    assert json.loads(path.read_text())["plugin"] == "xce.provisioner.xceprov"
    assert read_inventory(path) == inv
    assert (path.stat().st_mode & 0o777, path.parent.stat().st_mode & 0o777) == (0o600, 0o700)


def _ansible_inventory(state: Path, inventory: str) -> dict[str, Any]:
    """``ansible-inventory --list`` as an operator runs it from the toolkit's root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "XCEPROV_"))}
    env.update(XCEPROV_STATE_DIR=str(state), ANSIBLE_LOCAL_TEMP=str(state / "tmp"))
    out = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", inventory, "--list"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert "WARNING" not in out.stderr, out.stderr
    return dict(json.loads(out.stdout))


def test_inventory_plugin_reads_terraform_state_and_marks_data_unsafe(tmp_path: Path) -> None:
    wd = tmp_path / "state" / "work" / "demo" / "sim"
    wd.mkdir(parents=True)
    hostile = "{{ lookup('pipe', 'id') }}"
    state = _state(("op1-000", "i-1", "h1", "10.0.0.1"), ("op1-001", "i-2", "bad*name", "10.0.0.2"))
    state["outputs"]["instances"]["value"]["op1-000"]["tags"]["xce:op_id"] = hostile  # type: ignore[index]
    (wd / "terraform.tfstate").write_text(json.dumps(state))
    (tmp_path / "state" / "work" / "demo" / "broken").mkdir()
    (tmp_path / "state" / "work" / "demo" / "broken" / "terraform.tfstate").write_text("{not json")
    saved = build_inventory(
        [InstanceRecord("op0-000", "i-0", "old", "10.0.0.9", "cpu", "sim", "op0")],
        {"ansible_user": "admin"},
        {"cpu": TemplateBootstrap(vars={"tuned": "{{ 'hpc' }}"}, data={"xce_node_manager_xce": {"model": hostile}})},
    )
    write_inventory(tmp_path / "state" / "ansible" / "inventory" / "xceprov.yml", saved)

    inv = _ansible_inventory(tmp_path / "state", "inventories/xceprov.yml")

    hv = inv["_meta"]["hostvars"]
    assert set(hv) == {"h1"}  # hosts from the state; the name with a pattern character is left out
    assert hv["h1"]["ansible_host"] == {"__ansible_unsafe": "10.0.0.1"}
    assert hv["h1"]["xce_op_id"] == {"__ansible_unsafe": hostile}
    # Settings of the inventory written last: data unsafe, the site's bootstrap.vars ordinary.
    assert hv["h1"]["ansible_user"] == {"__ansible_unsafe": "admin"}
    assert hv["h1"]["xce_node_manager_xce"] == {"model": {"__ansible_unsafe": hostile}}
    assert hv["h1"]["tuned"] == "{{ 'hpc' }}"
    assert records_from_workdirs(tmp_path / "state", "demo")[0].name == "h1"


def test_inventory_plugin_takes_a_written_inventory_as_it_is(tmp_path: Path) -> None:
    hostile = "{{ lookup('pipe', 'id') }}"
    inv = build_inventory(
        [InstanceRecord("op1-000", "i-1", "h1", "10.0.0.1", "cpu", "sim", hostile, port=2222)],
        {},
        {"cpu": TemplateBootstrap(vars={"tuned": "{{ 'hpc' }}"}, data={"xce_node_manager_xce": {"model": hostile}})},
    )
    path = write_inventory(tmp_path / "state" / "ansible" / "inventory" / "xceprov.yml", inv)

    out = _ansible_inventory(tmp_path / "state", str(path))

    hv = out["_meta"]["hostvars"]["h1"]
    assert hv["xce_op_id"] == {"__ansible_unsafe": hostile} and hv["ansible_port"] == 2222
    assert hv["xce_node_manager_xce"] == {"model": {"__ansible_unsafe": hostile}}
    assert hv["tuned"] == "{{ 'hpc' }}"  # the site's bootstrap.vars stay ordinary variables
    assert out["template_cpu"]["hosts"] == ["h1"]


def test_records_come_from_every_shard_of_a_provider(tmp_path: Path) -> None:
    work = tmp_path / "state" / "work" / "demo"
    (work / "sim" / "shards" / "1").mkdir(parents=True)
    (work / "sim" / "terraform.tfstate").write_text(json.dumps(_state(("op-a-000", "i-1", "h1", "10.0.0.1"))))
    (work / "sim" / "shards" / "1" / "terraform.tfstate").write_text(
        json.dumps(_state(("op-a-001", "i-2", "h2", "10.0.0.2")))
    )
    records = records_from_workdirs(tmp_path / "state", "demo")
    assert sorted((r.name, r.provider) for r in records) == [("h1", "sim"), ("h2", "sim")]


def test_an_instance_s_offering_is_a_host_variable_read_back_from_its_tag() -> None:
    state = _state(("op1-000", "i-1", "h1", "10.0.0.1"), ("op1-001", "i-2", "h2", "10.0.0.2"))
    state["outputs"]["instances"]["value"]["op1-000"]["tags"]["xce:offering"] = "c16.large@zone-b"  # type: ignore[index]
    inv = build_inventory(records_from_tfstate(state))
    hosts = inv["all"]["hosts"]
    assert hosts["h1"]["xce_offering"] == "c16.large@zone-b"
    assert "xce_offering" not in hosts["h2"]  # an instance made before offerings: as before
    assert [r.offering for r in records_from_inventory(inv)] == ["c16.large@zone-b", ""]
