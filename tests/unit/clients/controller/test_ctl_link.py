"""The controller link against a scripted in-process TLS controller (loopback)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from ctlfake import FakeConn, FakeController, Pki, record_joins

from orchestrator.clients.controller.lease import LeaseManager
from orchestrator.clients.controller.link import ControllerLink, join_lease_manager
from orchestrator.clients.controller.types import DemandSnapshot, Epoch, Fact, LeaseGrant, LinkState
from orchestrator.errors import ControllerError, LeaseLost
from orchestrator.model.config import ControllerSettings


def settings(addresses: list[str], ca: Path, **kw: Any) -> ControllerSettings:
    base: dict[str, Any] = {"connect_timeout": 2.0, "request_timeout": 2.0}
    base.update(kw)
    return ControllerSettings(addresses=addresses, ca=ca, **base)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_join_request_reply_and_typed_answers(fake: FakeController, pki: Pki) -> None:
    with ControllerLink(settings([fake.address], pki.ca), instance_id="orch-a", providers=["p1"]) as link:
        state = link.open(resync=True)
        assert state.connected and state.address == fake.address and state.term == 1
        assert state.lease_ttl == 15.0
        grant = link.acquire("p1")
        assert isinstance(grant, LeaseGrant) and grant.epoch == Epoch(1, 1)
        assert link.facts("p1")[0].fact_id == 7
        demand = link.demand()
        assert demand is not None and demand.templates[0].wanted == 2
        fid = link.commit_fact(Fact("requestIntent", "p1", "op-2", Epoch(1, 1), count=1))
        assert fid == 9 and link.facts("p1")[-1].fact_id == 9
        assert link.host_status()[0].host_name == "cpu-1"
    assert fake.seen[0] == "joinProvisioner"


def test_controller_going_away_mid_request_is_a_retryable_error(fake: FakeController, pki: Pki) -> None:
    fake.handlers["leaseRenew"] = lambda *_: "drop"
    with ControllerLink(settings([fake.address], pki.ca, request_timeout=30.0), instance_id="a") as link:
        link.open()
        with pytest.raises(ControllerError, match="lost mid-request") as info:
            link.renew("p1", Epoch(1, 1))
        assert info.value.exit_code == 75
        with pytest.raises(ControllerError, match="not connected"):
            link.acquire("p1")


def test_no_reply_times_out_and_drops_the_connection(fake: FakeController, pki: Pki) -> None:
    fake.handlers["leaseRenew"] = lambda *_: None
    with ControllerLink(settings([fake.address], pki.ca, request_timeout=0.3), instance_id="a") as link:
        link.open()
        with pytest.raises(ControllerError, match=r"no reply .* within 0.3s to leaseRenew"):
            link.renew("p1", Epoch(1, 1))
        assert not link.state().connected


def test_redirect_to_the_primary_is_followed(fake: FakeController, pki: Pki) -> None:
    standby = FakeController(pki.server_ctx)
    try:
        standby.handlers["joinProvisioner"] = lambda *_: (
            "error",
            {"code": "notPrimary", "message": "standby", "redirect": fake.address},
        )
        with ControllerLink(settings([standby.address], pki.ca), instance_id="a") as link:
            state = link.open()
            assert state.address == fake.address
    finally:
        standby.close()


def test_unreachable_names_every_address_tried(pki: Pki) -> None:
    a, b = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    with ControllerLink(settings([a, b], pki.ca), instance_id="a") as link, pytest.raises(ControllerError) as info:
        link.open()
    message = str(info.value)
    assert a in message and b in message and "cannot connect" in message
    assert "\n" not in message


def test_wrong_ca_is_refused_with_a_message_saying_so(fake: FakeController, pki: Pki) -> None:
    with (
        ControllerLink(settings([fake.address], pki.other_ca), instance_id="a") as link,
        pytest.raises(ControllerError, match="not signed by the configured CA"),
    ):
        link.open()


def test_wrong_host_name_is_refused_with_a_message_saying_so(fake: FakeController, pki: Pki) -> None:
    s = settings([fake.address], pki.ca, server_name="controller.elsewhere.example")
    with ControllerLink(s, instance_id="a") as link, pytest.raises(ControllerError, match="host name mismatch"):
        link.open()


def test_reconnect_rejoins_resyncs_and_reacquires(fake: FakeController, pki: Pki) -> None:
    link = ControllerLink(settings([fake.address], pki.ca), instance_id="a", providers=["p1"])
    manager = LeaseManager(link, ["p1"], margin=1.0)
    join_lease_manager(link, manager)
    joins: list[LinkState] = []
    resyncs: list[dict[str, list[Fact]]] = []
    first, second = threading.Event(), threading.Event()

    def on_reconnect(state: LinkState) -> None:
        joins.append(state)
        (first if len(joins) == 1 else second).set()

    link.on_reconnect(on_reconnect)
    link.on_resync(resyncs.append)
    link.start()
    manager.start()
    try:
        assert first.wait(10)
        fake.drop_all()
        assert second.wait(20)
        assert fake.seen.count("joinProvisioner") == 2
        assert fake.seen.count("requestDemand") == 2
        assert fake.seen.count("queryFacts") == 2
        assert joins[1].reconnects == 1
        assert [f.fact_id for f in resyncs[1]["p1"]] == [7]
        deadline = time.monotonic() + 10
        while not manager.valid("p1") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert manager.valid("p1")
    finally:
        manager.close()
        link.close()
    assert "leaseRelease" in fake.seen


def test_revocation_push_invalidates_the_lease_at_once(fake: FakeController, pki: Pki) -> None:
    conns = record_joins(fake)
    link = ControllerLink(settings([fake.address], pki.ca), instance_id="a", providers=["p1"])
    manager = LeaseManager(link, ["p1"], margin=1.0)
    revoked = threading.Event()
    join_lease_manager(link, manager)
    link.on_lease_revoked(lambda _: revoked.set())
    try:
        link.open()
        manager.step()
        epoch = manager.gate("p1")
        conns[0].push(
            "leaseRevoked", {"provider": "p1", "epoch": {"term": epoch.term, "seq": epoch.seq}, "reason": "admin"}
        )
        assert revoked.wait(10)
        with pytest.raises(LeaseLost, match="revoked"):
            manager.gate("p1")
    finally:
        manager.close(release=False)
        link.close()


def test_only_newer_demand_snapshots_are_delivered(fake: FakeController, pki: Pki) -> None:
    conns = record_joins(fake)
    got: list[DemandSnapshot] = []
    done = threading.Event()

    def on_demand(s: DemandSnapshot) -> None:
        got.append(s)
        if s.seq == 5:
            done.set()

    with ControllerLink(settings([fake.address], pki.ca), instance_id="a") as link:
        link.on_demand(on_demand)
        link.open()
        for seq in (3, 2, 5):
            templates = [{"template": "cpu", "wanted": seq}]
            conns[0].push("demand", {"seq": seq, "term": 1, "templates": templates})
        assert done.wait(10)
    # The older snapshot 2 is never delivered; 3 may be superseded by 5 before the consumer
    # takes it (the push slot keeps only the newest snapshot: demand is level-triggered).
    seqs = [s.seq for s in got]
    assert 2 not in seqs and seqs[-1] == 5 and seqs == sorted(set(seqs))


def test_malformed_frame_from_the_controller_drops_the_connection(fake: FakeController, pki: Pki) -> None:
    def garbage(member: str, payload: Any, conn: FakeConn) -> None:
        with conn.lock:
            conn.sock.sendall(b"\x10\x00\x00\x00\x00\x00\x00\x00" + b"\xff" * 16)

    fake.handlers["leaseAcquire"] = garbage
    with ControllerLink(settings([fake.address], pki.ca, request_timeout=30.0), instance_id="a") as link:
        link.open()
        with pytest.raises(ControllerError, match="protocol error"):
            link.acquire("p1")


def test_missing_ca_is_a_config_error_and_the_background_loop_survives(fake: FakeController, tmp_path: Path) -> None:
    from orchestrator.errors import ConfigError

    missing = tmp_path / "nope.pem"
    with (
        ControllerLink(settings([fake.address], missing), instance_id="a") as link,
        pytest.raises(ConfigError, match=r"nope\.pem"),
    ):
        link.open()
    link = ControllerLink(settings([fake.address], missing), instance_id="a")
    link.start()
    try:
        time.sleep(0.5)
        assert any(t.name == "ctl-connect" and t.is_alive() for t in threading.enumerate())
        assert not link.state().connected
    finally:
        link.close()


def test_a_reply_that_cannot_be_converted_drops_only_the_connection(fake: FakeController, pki: Pki) -> None:
    fake.handlers["leaseAcquire"] = lambda *_: ("demand", {"seq": 1, "templates": [{"template": "cpu"}]})
    with ControllerLink(settings([fake.address], pki.ca), instance_id="a") as link:
        link.open()
        with pytest.raises(ControllerError, match="unexpected reply"):
            link.acquire("p1")
        assert link.request_demand().seq == 1  # the connection is still fine


def test_a_batch_is_one_request_and_a_stale_epoch_refuses_it_whole(fake: FakeController, pki: Pki) -> None:
    answers = iter([{"facts": [{"factId": 20}, {"factId": 21}]}])
    fake.handlers["commitFacts"] = lambda _m, payload, _c: (
        ("committed", next(answers))
        if len(payload["facts"]) == 2
        else ("reject", {"reason": "staleEpoch", "currentEpoch": {"term": 1, "seq": 4}})
    )
    facts = [Fact("instanceCreated", "p1", "op-2", Epoch(1, 1), instance_key=f"op-2-{i}") for i in range(3)]
    with ControllerLink(settings([fake.address], pki.ca), instance_id="orch-a", providers=["p1"]) as link:
        link.open()
        assert link.commit_facts(facts[:2]) == [20, 21]
        assert [f.fact_id for f in link.facts("p1")] == [20, 21]
        with pytest.raises(LeaseLost, match=r"batch of 3 facts: stale epoch"):
            link.commit_facts(facts)
    assert fake.seen.count("commitFacts") == 2 and "commitFact" not in fake.seen


def test_a_controller_without_batches_gets_one_commit_per_fact(fake: FakeController, pki: Pki) -> None:
    # The fake answers commitFacts with error(unsupported), as a controller of an older version.
    facts = [Fact("instanceCreated", "p1", "op-2", Epoch(1, 1), instance_key=f"op-2-{i}") for i in range(3)]
    with ControllerLink(settings([fake.address], pki.ca), instance_id="orch-a", providers=["p1"]) as link:
        link.open()
        assert link.commit_facts(facts) == [9, 9, 9]
        assert link.commit_facts(facts[:1]) == [9]
    assert fake.seen.count("commitFacts") == 1  # asked once, not again
    assert fake.seen.count("commitFact") == 4
