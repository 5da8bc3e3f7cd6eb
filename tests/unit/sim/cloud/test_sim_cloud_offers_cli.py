"""``xceprov sim fault capacity --zone``, ``sim fault quota`` and ``sim cloud requests`` through click."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.sim.cloud.store import CloudStore, InstanceLimitExceeded, InsufficientCapacity
from tests.sim_cloud_cli import cloud_store as _store
from tests.sim_cloud_cli import run_cli as _run

OWNER = {"xce:cluster": "demo", "xce:provider": "sim"}


def test_capacity_per_zone_and_the_quota_are_set_shown_and_enforced(config: Path) -> None:
    assert _run(config, "sim", "fault", "capacity", "c8", "0", "--zone", "b")[0] == 0
    assert _run(config, "sim", "fault", "capacity", "c4", "3")[0] == 0
    code, out, _ = _run(config, "sim", "fault", "quota", "5")
    assert code == 0 and "capacity:      c4=3, c8@b=0" in out and "quota:         5 live instances" in out
    doc = json.loads(_run(config, "sim", "fault", "show", "--json")[1])
    assert doc["capacity"] == {"c4": 3}
    assert doc["zone_capacity"] == [{"flavor": "c8", "zone": "b", "limit": 0}]
    assert doc["quota"] == 5
    store = _store(config)
    with pytest.raises(InsufficientCapacity, match="flavor c8 in zone b has no capacity"):
        store.create_instance("h", "c8", "debian-12", OWNER, "", "k-0", zone="b")
    store.create_instance("h", "c8", "debian-12", OWNER, "", "k-1", zone="a")

    assert _run(config, "sim", "fault", "capacity", "c8", "--zone", "b", "--clear")[0] == 0
    assert _run(config, "sim", "fault", "quota", "1")[0] == 0
    with pytest.raises(InstanceLimitExceeded):
        store.create_instance("h", "c8", "debian-12", OWNER, "", "k-2", zone="b")
    code, out, _ = _run(config, "sim", "fault", "quota", "--clear")
    assert code == 0 and "quota:         none" in out and "c8@b" not in out


def test_requests_json_lists_every_attempt_and_since_filters(config: Path) -> None:
    now = [1_800_000_000.0]
    store = CloudStore(config.parent / "sim" / "cloud.sqlite", clock=lambda: now[0])
    store.set_capacity("c8", 0, zone="b")
    with pytest.raises(InsufficientCapacity):
        store.create_instance("h", "c8", "debian-12", OWNER, "", "op-1-000", zone="b", subnet="s1")
    now[0] += 1.5
    made = store.create_instance("h", "c8", "debian-12", OWNER, "", "op-1-001", zone="a")
    code, out, _ = _run(config, "sim", "cloud", "requests", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["store"].endswith("cloud.sqlite")
    first, second = doc["requests"]
    assert {k: first[k] for k in ("action", "outcome", "flavor", "zone", "subnet", "offering", "client_token")} == {
        "action": "create",
        "outcome": "capacity",
        "flavor": "c8",
        "zone": "b",
        "subnet": "s1",
        "offering": "c8@b@s1",
        "client_token": "op-1-000",
    }
    assert first["detail"] == "InsufficientCapacity: flavor c8 in zone b has no capacity (limit 0)"
    assert (second["outcome"], second["instance_id"], second["provider"]) == ("created", made.id, "sim")
    assert second["at"] == 1_800_000_001.5
    later = json.loads(_run(config, "sim", "cloud", "requests", "--json", "--since", "1800000001")[1])
    assert [r["seq"] for r in later["requests"]] == [second["seq"]]
    future = json.loads(_run(config, "sim", "cloud", "requests", "--json", "--since", "99999999999")[1])
    assert future["requests"] == []
    code, out, _ = _run(config, "sim", "cloud", "requests")
    assert code == 0 and out.splitlines()[0].split()[:5] == ["SEQ", "TIME", "ACTION", "OUTCOME", "OFFERING"]
    assert "c8@b@s1" in out and "capacity" in out

    # The instance's zone and subnet in the listing.
    listed = json.loads(_run(config, "sim", "cloud", "list", "--json")[1])["instances"]
    assert [(i["zone"], i["subnet"]) for i in listed] == [("a", "")]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sim", "fault", "capacity", "c8", "-1", "--zone", "b"], "bad count '-1'"),
        (["sim", "fault", "capacity", "c8", "2", "--zone", ""], "--zone needs a zone name"),
        (["sim", "fault", "capacity", "c8", "--zone", "b"], "capacity needs either a count or --clear"),
        (["sim", "fault", "quota"], "quota needs either a count or --clear"),
        (["sim", "fault", "quota", "3", "--clear"], "quota needs either a count or --clear"),
        (["sim", "fault", "quota", "many"], "bad count 'many'"),
        (["sim", "fault", "quota", "-2"], "bad count '-2'"),
        (["sim", "cloud", "requests", "--since", "yesterday"], "bad --since 'yesterday'"),
        (["sim", "cloud", "requests", "--since", "-5"], "bad --since '-5'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(config: Path, args: list[str], message: str) -> None:
    code, out, err = _run(config, *args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in err
