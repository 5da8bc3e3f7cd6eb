"""``xceprov status``: which instance holds each provider, from the controller's leases or the
shared store's live members; a store that does not answer is said so (through the CLI)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from ctlfake import FakeController, Pki

from orchestrator.cli.main import cli
from orchestrator.model.config import Config
from orchestrator.protocol.holder import holder_parts
from orchestrator.services import status as status_service
from tests.unit.daemon.memberfake import FakeStore

PROC_A = "unit-daemon-m1.4242.0123456789abcdef"
PROC_B = "unit-daemon-m2.77.fedcba9876543210"


def site(tmp_path: Path, address: str, pki: Pki) -> Path:
    config = tmp_path / "xceprov.yaml"
    config.write_text(
        json.dumps(
            {
                "cluster": "unit",
                "state_dir": str(tmp_path / "state"),
                "controller": {"addresses": [address], "ca": str(pki.ca), "connect_timeout": 2},
                "providers": {p: {"module": "xcesim"} for p in ("p1", "p2", "p3")},
                "templates": {
                    "cpu": {"providers": {p: {"flavor": "c8", "image": "debian-12"} for p in ("p1", "p2", "p3")}}
                },
            }
        )
    )
    return config


def leases(fake: FakeController) -> None:
    def lease(provider: str, holder: str, seq: int) -> dict[str, Any]:
        return {"provider": provider, "holder": holder, "epoch": {"term": 4, "seq": seq}, "expiresInMs": 9000}

    fake.handlers["queryStatus"] = lambda *_: (
        "status",
        {"term": 4, "leases": [lease("p1", f"provisioner/{PROC_A}", 1), lease("p2", f"provisioner/{PROC_B}", 2)]},
    )
    fake.handlers["queryFacts"] = lambda _m, p, _c: ("factList", {"provider": p["provider"], "facts": []})


def holder_section(config: Path, title: str) -> list[str]:
    """The three provider lines under ``title`` in ``xceprov status`` (which must exit 0)."""
    result = CliRunner().invoke(cli, ["--config", str(config), "status"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()  # stdout alone: a logging error of another test may land on stderr
    at = lines.index(title)
    return lines[at + 1 : at + 4]


def test_holder_parts_name_the_process_instance_and_its_label() -> None:
    assert holder_parts(f"provisioner/{PROC_A}") == (PROC_A, "unit-daemon-m1")
    assert holder_parts("provisioner/handmade") == ("handmade", "handmade")
    assert holder_parts("provisioner") == ("provisioner", "provisioner")  # a legacy holder: the identity


def test_without_a_shared_store_the_holders_come_from_the_controller(
    fake: FakeController, pki: Pki, tmp_path: Path
) -> None:
    leases(fake)
    config = site(tmp_path, fake.address, pki)
    assert holder_section(config, "holders (the controller's leases)") == [
        f"  p1               unit-daemon-m1  instance {PROC_A}  epoch 4.1",
        f"  p2               unit-daemon-m2  instance {PROC_B}  epoch 4.2",
        "  p3               none",
    ]
    doc = json.loads(CliRunner().invoke(cli, ["--config", str(config), "status", "--json"]).stdout)
    assert doc["holders_from"] == "controller" and doc["store"] is None
    assert doc["holders"][0] == {"provider": "p1", "instance": PROC_A, "label": "unit-daemon-m1", "epoch": "4.1"}


def test_with_a_shared_store_the_holders_come_from_its_live_members(
    fake: FakeController, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases(fake)
    store = FakeStore(time.monotonic)
    store.put("m1.1.aaaaaaaaaaaaaaaa", ["p1", "p2", "p3"], {"p1": "4.1", "p3": "4.3"})
    # A handover seen between two heartbeats: the old holder still lists p2 with an older epoch.
    store.put("m2.2.bbbbbbbbbbbbbbbb", ["p1", "p2", "p3"], {"p2": "4.5"})
    store.put("m3.3.cccccccccccccccc", ["p1", "p2", "p3"], {"p2": "4.2"})
    opened: list[Config] = []

    def open_store(config: Config) -> FakeStore:
        opened.append(config)
        return store

    monkeypatch.setattr(status_service, "open_member_store", open_store)
    config = site(tmp_path, fake.address, pki)
    assert holder_section(config, "holders (the shared store's live members: 3)") == [
        "  p1               label-m1.1.aaaaaaaaaaaaaaaa  instance m1.1.aaaaaaaaaaaaaaaa  epoch 4.1",
        "  p2               label-m2.2.bbbbbbbbbbbbbbbb  instance m2.2.bbbbbbbbbbbbbbbb  epoch 4.5",
        "  p3               label-m1.1.aaaaaaaaaaaaaaaa  instance m1.1.aaaaaaaaaaaaaaaa  epoch 4.3",
    ]
    assert store.calls[-1] == "close" and opened
    doc = json.loads(CliRunner().invoke(cli, ["--config", str(config), "status", "--json"]).stdout)
    assert doc["holders_from"] == "store" and doc["store"]["reachable"] is True
    assert [m["instance"] for m in doc["store"]["members"]] == sorted(store.rows)
    assert {h["provider"]: h["epoch"] for h in doc["holders"]} == {"p1": "4.1", "p2": "4.5", "p3": "4.3"}


def test_a_shared_store_that_does_not_answer_is_said_so_and_the_controller_names_the_holders(
    fake: FakeController, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    leases(fake)
    store = FakeStore(time.monotonic, down="connection to server failed\nsecond line")
    monkeypatch.setattr(status_service, "open_member_store", lambda _config: store)
    config = site(tmp_path, fake.address, pki)
    result = CliRunner().invoke(cli, ["--config", str(config), "status"])
    assert result.exit_code == 0, result.output
    assert "shared store  UNREACHABLE: connection to server failed\nholders (the controller's leases)" in result.stdout
    assert f"  p1               unit-daemon-m1  instance {PROC_A}  epoch 4.1" in result.stdout
    doc = json.loads(CliRunner().invoke(cli, ["--config", str(config), "status", "--json"]).stdout)
    assert doc["store"] == {"reachable": False, "error": "connection to server failed", "members": []}
    assert doc["holders_from"] == "controller"


def test_with_no_controller_the_shared_store_still_says_who_holds_what(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FakeStore(time.monotonic)
    store.put("m1.1.aaaaaaaaaaaaaaaa", ["p1", "p2", "p3"], {"p1": "4.1", "p2": "4.2"})
    monkeypatch.setattr(status_service, "open_member_store", lambda _config: store)
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens on it
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    config = site(tmp_path, address, pki)
    result = CliRunner().invoke(cli, ["--config", str(config), "status"])
    assert result.exit_code == 75, result.output
    assert (
        "holders (the shared store's live members: 1)\n"
        "  p1               label-m1.1.aaaaaaaaaaaaaaaa  instance m1.1.aaaaaaaaaaaaaaaa  epoch 4.1\n"
        "  p2               label-m1.1.aaaaaaaaaaaaaaaa  instance m1.1.aaaaaaaaaaaaaaaa  epoch 4.2\n"
        "  p3               none\n"
    ) in result.stdout
    as_json = CliRunner().invoke(cli, ["--config", str(config), "status", "--json"])
    doc = json.JSONDecoder().raw_decode(as_json.stdout)[0]
    assert doc["controller"]["reachable"] is False and doc["store"]["reachable"] is True
    assert [h["provider"] for h in doc["holders"]] == ["p1", "p2"]


def test_status_names_holders_by_the_deal_s_live_window_not_one_whole_ttl(
    fake: FakeController, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member silent for two heartbeat intervals (2/3 of the lease TTL, 15 s here) is already
    dealt out by the daemons: status must not still name it as a holder."""
    leases(fake)
    now = [1000.0]
    store = FakeStore(lambda: now[0])
    store.put("m1.1.aaaaaaaaaaaaaaaa", ["p1", "p2", "p3"], {"p1": "4.1"})
    now[0] += 11.0  # older than 10 s (2/3 of 15 s), younger than one TTL
    store.put("m2.2.bbbbbbbbbbbbbbbb", ["p1", "p2", "p3"], {"p2": "4.2"})
    monkeypatch.setattr(status_service, "open_member_store", lambda _config: store)
    config = site(tmp_path, fake.address, pki)
    assert holder_section(config, "holders (the shared store's live members: 1)") == [
        "  p1               none",
        "  p2               label-m2.2.bbbbbbbbbbbbbbbb  instance m2.2.bbbbbbbbbbbbbbbb  epoch 4.2",
        "  p3               none",
    ]
