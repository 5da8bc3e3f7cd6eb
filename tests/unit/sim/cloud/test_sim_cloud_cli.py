"""``xceprov sim cloud list`` and ``xceprov sim fault ...`` through click."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.sim_cloud_cli import cloud_store as _store
from tests.sim_cloud_cli import run_cli as _run


def test_list_table_and_json(config: Path) -> None:
    store = _store(config)
    a = store.create_instance(
        "burst-1",
        "c8.large",
        "debian-12",
        {"xce:cluster": "demo", "xce:provider": "sim", "xce:op_id": "op1", "odd": "x\ny"},
        "",
        "op1-0",
    )
    b = store.create_out_of_band("stray", "g4.xlarge", "debian-12", {"xce:cluster": "other"})
    store.delete(b.id)
    code, out, _ = _run(config, "sim", "cloud", "list")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "FLAVOR", "ZONE", "SUBNET", "STATE", "ADDRESS", "LAUNCHED", "OWNER"]
    assert len(lines) == 2 and a.id in lines[1] and "cluster=demo provider=sim op=op1" in lines[1]

    code, out, _ = _run(config, "sim", "cloud", "list", "--json", "--all")
    doc = json.loads(out)
    assert doc["store"].endswith("cloud.sqlite")
    assert [i["id"] for i in doc["instances"]] == [a.id, b.id]
    assert doc["instances"][0]["tags"]["odd"] == "x\ny"
    assert doc["instances"][1]["state"] == "terminated"

    code, out, _ = _run(config, "sim", "cloud", "list", "--json", "--tag", "xce:op_id=op1", "--tag", "odd=x\ny")
    assert [i["id"] for i in json.loads(out)["instances"]] == [a.id]


def test_fault_commands_change_the_store(config: Path) -> None:
    assert _run(config, "sim", "fault", "error-rate", "0.3", "--seed", "5")[0] == 0
    assert _run(config, "sim", "fault", "capacity", "c8.large", "4")[0] == 0
    assert _run(config, "sim", "fault", "slow-launch", "2")[0] == 0
    code, out, _ = _run(config, "sim", "fault", "show", "--json")
    assert _run(config, "sim", "fault", "lost-response", "0.5")[0] == 0
    code, out, _ = _run(config, "sim", "fault", "show", "--json")
    assert json.loads(out) == {
        "error_rate": 0.3,
        "seed": 5,
        "slow_launch": 2.0,
        "capacity": {"c8.large": 4},
        "zone_capacity": [],
        "quota": None,
        "lost_response": 0.5,
        "notices": [],
    }
    assert _run(config, "sim", "fault", "capacity", "c8.large", "--clear")[0] == 0
    assert _store(config).faults().capacity == {}
    code, out, _ = _run(config, "sim", "fault", "clear")
    assert code == 0 and "error rate:    0\n" in out and "capacity:      unlimited" in out
    assert _store(config).faults().error_rate == 0.0


def test_out_of_band_create_delete_and_spot_reclaim(config: Path) -> None:
    code, out, _ = _run(
        config,
        "sim",
        "fault",
        "create",
        "--name",
        "stray",
        "--flavor",
        "spot.small",
        "--image",
        "deb",
        "--tag",
        "xce:cluster=demo",
        "--tag",
        "note=a=b",
    )
    assert code == 0
    stray_id = out.split()[0]
    inst = _store(config).get(stray_id)
    assert inst is not None and dict(inst.tags) == {"xce:cluster": "demo", "note": "a=b"}
    other = _store(config).create_out_of_band("x", "spot.small", "deb", {})
    code, out, _ = _run(config, "sim", "fault", "spot-reclaim", "--flavor", "spot.small")
    assert code == 0 and stray_id in out and other.id in out and "spot-reclaim" in out
    third = _store(config).create_out_of_band("y", "c8.large", "deb", {})
    code, out, _ = _run(config, "sim", "fault", "delete", third.id)
    assert code == 0
    assert _store(config).get(third.id).state_reason == "out-of-band-delete"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("error-rate", "1.5"), "bad error rate '1.5'"),
        (("error-rate", "lots"), "bad error rate 'lots'"),
        (("lost-response", "-1"), "bad lost response rate '-1'"),
        (("capacity", "c8.large", "-1"), "bad count '-1'"),
        (("capacity", "c8.large"), "either a count or --clear"),
        (("slow-launch", "-2"), "bad duration '-2'"),
        (("delete", "i-000000000000"), "no instance i-000000000000"),
        (("spot-reclaim",), "exactly one of"),
        (("spot-reclaim", "i-000000000000"), "no instance i-000000000000"),
        (("create", "--name", "n", "--flavor", "f", "--image", "i", "--tag", "novalue"), "bad tag 'novalue'"),
    ],
)
def test_bad_input_is_one_usage_line(config: Path, args: tuple[str, ...], message: str) -> None:
    code, _, err = _run(config, "sim", "fault", *args)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_capacity_error_of_out_of_band_create_is_one_line(config: Path) -> None:
    _store(config).set_capacity("c8.large", 0)
    args = ("create", "--name", "n", "--flavor", "c8.large", "--image", "i")
    code, _, err = _run(config, "sim", "fault", *args)
    assert code == 2
    assert err.strip() == "xceprov: InsufficientCapacity: flavor c8.large has no capacity (limit 0)"


def test_the_cli_shows_the_journal(config: Path) -> None:
    store = _store(config)
    a = store.create_instance(
        "a", "c8.large", "debian-12", {"xce:cluster": "demo", "xce:provider": "sim"}, "", "op1-0", epoch="3.7"
    )
    store.create_out_of_band("odd\nname", "c8.large", "debian-12", {"xce:provider": "x\x1b[31m"})
    store.delete(a.id, epoch="3.8")
    code, out, _ = _run(config, "sim", "cloud", "mutations", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["store"].endswith("cloud.sqlite")
    assert [(m["seq"], m["action"], m["provider"], m["epoch"]) for m in doc["mutations"]] == [
        (1, "create", "sim", "3.7"),
        (2, "create", "x\x1b[31m", ""),
        (3, "delete", "sim", "3.8"),
    ]
    assert doc["mutations"][2]["reason"] == "user-terminate" and doc["mutations"][2]["instance_id"] == a.id
    code, out, _ = _run(config, "sim", "cloud", "mutations", "--provider", "sim")
    lines = out.splitlines()
    assert code == 0
    assert lines[0].split() == ["SEQ", "TIME", "PROVIDER", "ACTION", "INSTANCE", "KEY", "EPOCH", "REASON"]
    assert [ln.split()[3] for ln in lines[1:]] == ["create", "delete"]
    table = _run(config, "sim", "cloud", "mutations")[1]
    assert "\x1b" not in table and "x\\x1b[31m" in table  # a hostile tag cannot drive the terminal
    code, _, err = _run(config, "sim", "cloud", "mutations", "--provider", "")
    assert code != 0 and "--provider needs a provider name" in err


def test_the_cli_lists_images_by_tag(config: Path) -> None:
    store = _store(config)
    owner = {"xce:cluster": "demo", "xce:provider": "sim", "xce:template": "cpu"}
    builder = store.create_instance("builder", "c8.large", "debian-12", owner, "", "bake-1")
    kept = store.create_image(builder.id, "cpu\x1b[31m", owner, epoch="2.1")
    gone = store.create_image(builder.id, "old", {"xce:cluster": "other"})
    store.delete_image(gone.id)
    code, out, _ = _run(config, "sim", "cloud", "images")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["ID", "NAME", "STATE", "INSTANCE", "SOURCE", "CREATED", "OWNER"]
    assert len(lines) == 2 and kept.id in lines[1] and builder.id in lines[1] and "debian-12" in lines[1]
    assert "cluster=demo provider=sim template=cpu" in lines[1] and "\x1b" not in out
    code, out, _ = _run(config, "sim", "cloud", "images", "--json", "--all")
    doc = json.loads(out)
    assert [(i["id"], i["state"]) for i in doc["images"]] == [(kept.id, "available"), (gone.id, "deleted")]
    code, out, _ = _run(config, "sim", "cloud", "images", "--json", "--tag", "xce:template=cpu", "--all")
    assert [i["id"] for i in json.loads(out)["images"]] == [kept.id]
    code, out, _ = _run(config, "sim", "cloud", "mutations", "--json")
    actions = [(m["action"], m["instance_id"], m["epoch"]) for m in json.loads(out)["mutations"]]
    assert ("create-image", kept.id, "2.1") in actions and ("delete-image", gone.id, "") in actions
    code, _, err = _run(config, "sim", "cloud", "images", "--tag", "novalue")
    assert code != 0 and "bad tag 'novalue': expected KEY=VALUE" in err
