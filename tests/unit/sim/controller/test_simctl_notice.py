"""hostNotice: the cloud will reclaim a host; the controller closes it, records the reclaim time,
requeues its work and pushes ``interruptionNotice`` (docs/protocol.md, "Interruption notices")."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sim_controller_helpers import Running, client_cert, running_controller
from simctl_fakes import FakeConn, demand_of, fact, grant, worker

from orchestrator.clients.controller.hostnotice import HostNotices
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import HostEvent, LeaseGrant
from orchestrator.errors import LeaseLost
from orchestrator.model.config import ControllerSettings
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.ops.facts import LinkFacts
from orchestrator.sim.controller import admin
from orchestrator.sim.controller.clock import FakeClock
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.state import ErrorV, Host, RejectV
from orchestrator.sim.controller.store import FactRecord

WORK_S = 100.0


def _hosts(core: ControllerCore, clock: FakeClock, n: int = 2) -> tuple[tuple[int, int], FakeConn]:
    prov = FakeConn(100)
    core.add_session(prov.session(role="provisioner", instance_id="A", providers=frozenset({"sim"})))
    a = grant(core.acquire("A", "sim"))
    deadline = int((clock.wall() + 60) * 1000)
    for i in range(n):
        key = f"op-1-00{i}"
        r = core.commit_fact(
            "A",
            fact("sim", a.epoch, kind="expectedHost", instance_key=key, instance_id=f"i-{i}", host_name=key,
                 template="cpu", join_deadline_ms=deadline),
        )  # fmt: skip
        assert isinstance(r, FactRecord)
        worker(core, i + 1, key, f"i-{i}", credential_key=key)
    return a.epoch, prov


def _by_id(core: ControllerCore, instance_id: str) -> Host:
    return next(h for h in core.hosts.values() if h.instance_id == instance_id)


def test_a_noticed_busy_host_is_closed_its_work_requeued_and_the_event_pushed(
    core: ControllerCore, clock: FakeClock
) -> None:
    epoch, prov = _hosts(core, clock, 3)
    core.submit("cpu", 2, WORK_S)  # runs on two hosts; the third stays idle
    busy = [h for h in core.hosts.values() if h.state() == "busy"]
    assert len(busy) == 2
    noticed = busy[0]
    reclaim_ms = int((clock.wall() + 120) * 1000)
    state = core.notice_host("A", "sim", epoch, noticed.instance_id, "", reclaim_ms)
    assert state == "closed" and noticed.reclaim_at_ms == reclaim_ms and noticed.closed
    events = [e for e in prov.pushes("hostEvent") if e["host"]["instanceId"] == noticed.instance_id]
    assert events[-1]["kind"] == "interruptionNotice"
    assert events[-1]["host"]["reclaimAtUnixMs"] == reclaim_ms
    # The work went back and started again on the two hosts not noticed; never on the noticed one.
    assert core.requeued == 1 and noticed.busy_work == 0
    assert sorted(h.instance_id for h in core.hosts.values() if h.state() == "busy") == sorted(
        h.instance_id for h in core.hosts.values() if h is not noticed
    )
    # A second notice changes nothing and pushes nothing.
    pushed = len(prov.pushes("hostEvent"))
    assert core.notice_host("A", "sim", epoch, noticed.instance_id, "", reclaim_ms + 5000) == "closed"
    assert noticed.reclaim_at_ms == reclaim_ms and len(prov.pushes("hostEvent")) == pushed


def test_a_noticed_host_is_not_supply_and_the_work_wants_a_replacement(core: ControllerCore, clock: FakeClock) -> None:
    epoch, _ = _hosts(core, clock, 1)
    core.submit("cpu", 1, WORK_S)
    assert demand_of(core, "cpu")["wanted"] == 0
    core.notice_host("A", "sim", epoch, "i-0", "", int((clock.wall() + 120) * 1000))
    assert demand_of(core, "cpu")["wanted"] == 1


def test_a_noticed_host_not_joined_is_not_in_flight(core: ControllerCore, clock: FakeClock) -> None:
    prov = FakeConn(100)
    core.add_session(prov.session(role="provisioner", instance_id="A", providers=frozenset({"sim"})))
    a = grant(core.acquire("A", "sim"))
    core.commit_fact(
        "A",
        fact("sim", a.epoch, kind="expectedHost", instance_key="op-1-000", instance_id="i-0", host_name="h0",
             template="cpu", join_deadline_ms=int((clock.wall() + 60) * 1000)),
    )  # fmt: skip
    core.submit("cpu", 1, WORK_S)
    assert demand_of(core, "cpu")["in_flight"] == 1
    core.notice_host("A", "sim", a.epoch, "i-0", "", int((clock.wall() + 120) * 1000))
    assert demand_of(core, "cpu")["in_flight"] == 0 and demand_of(core, "cpu")["wanted"] == 1


def test_a_notice_is_fenced_and_names_a_known_host(core: ControllerCore, clock: FakeClock) -> None:
    epoch, _ = _hosts(core, clock, 1)
    stale = (epoch[0], epoch[1] - 1)
    assert isinstance(core.notice_host("A", "sim", stale, "i-0", "", 1), RejectV)
    unknown = core.notice_host("A", "sim", epoch, "i-nope", "", 1)
    assert isinstance(unknown, ErrorV) and unknown.code == "unknownHost"
    assert _by_id(core, "i-0").reclaim_at_ms == 0


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[Running]:
    with running_controller(tmp_path / "ctl") as rc:
        yield rc


def test_the_link_round_trip_over_the_wire(ctl: Running) -> None:
    cert, key = client_cert(ctl.state_dir, "provisioner", "orch-a")
    host, port = ctl.addr
    settings = ControllerSettings(addresses=[f"{host}:{port}"], ca=ctl.ca, client_cert=cert, client_key=key)
    with ControllerLink(settings, instance_id="orch-a", providers=["sim"]) as link:
        seen: list[HostEvent] = []
        got = threading.Event()

        def on_event(e: HostEvent) -> None:
            if e.kind == "interruptionNotice":
                seen.append(e)
                got.set()

        link.on_host_event(on_event)
        link.open()
        lease = link.acquire("sim")
        assert isinstance(lease, LeaseGrant)
        epoch: Epoch = lease.epoch
        LinkFacts(link).commit_many(
            [
                Fact(
                    FactKind.EXPECTED_HOST, "sim", "op-1", epoch, instance_key="op-1-000", instance_id="i-1",
                    host_name="h1", template="cpu", join_deadline=4_000_000_000.0,
                )
            ]
        )  # fmt: skip
        reclaim_at = 4_000_000_123.0
        notices = HostNotices(link)
        state, at = notices.notice_host(
            "sim", epoch, instance_id="i-1", kind="spot-interruption", reclaim_at=reclaim_at, detail="test"
        )
        assert state == "expected" and at > 0
        assert got.wait(10) and seen[0].host.reclaim_at == reclaim_at and seen[0].host.instance_id == "i-1"
        [info] = [h for h in link.host_status("sim") if h.instance_id == "i-1"]
        assert info.reclaim_at == reclaim_at
        # `xceprov sim controller status` shows it too.
        [shown] = [h for h in admin.status(ctl.state_dir)["hosts"] if h["instance_id"] == "i-1"]
        assert shown["reclaim_at_ms"] == int(reclaim_at * 1000)
        unknown = notices.notice_host(
            "sim", epoch, instance_id="i-none", kind="spot-interruption", reclaim_at=reclaim_at
        )
        assert unknown == ("unknownHost", 0.0)
        with pytest.raises(LeaseLost):
            notices.notice_host(
                "sim", Epoch(epoch.term, epoch.seq + 7), instance_id="i-1", kind="x", reclaim_at=reclaim_at
            )
