"""What the simulated controller remembers across a restart and a failover: joins, closes, the
term and when it started. A restart is a new ``ControllerCore`` over the same store directory."""

from __future__ import annotations

from pathlib import Path

from simctl_fakes import FakeConn, fact, grant, new_core, worker

from orchestrator.protocol.framing import open_envelope
from orchestrator.sim.controller.clock import FakeClock
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.state import Host
from orchestrator.sim.controller.store import ControllerStore, FactRecord


def _expect(core: ControllerCore, holder: str, epoch: tuple[int, int], key: str, iid: str, clock: FakeClock) -> None:
    """Commit the expectedHost record of one instance (host name = instance key, 60 s to join)."""
    deadline = int((clock.wall() + 60) * 1000)
    r = core.commit_fact(
        holder,
        fact("sim", epoch, kind="expectedHost", op="op-1", instance_key=key, instance_id=iid, host_name=key,
             template="cpu", address="10.213.0.9", join_deadline_ms=deadline),
    )  # fmt: skip
    assert isinstance(r, FactRecord)


def _by_key(core: ControllerCore) -> dict[str, Host]:
    return {h.instance_key: h for h in core.host_list("sim")}


def _restart(tmp_path: Path, store: ControllerStore, clock: FakeClock) -> tuple[ControllerStore, ControllerCore]:
    """Stop the controller (its store closed) and start a new one over the same directory."""
    store.close()
    again = ControllerStore(tmp_path)
    return again, new_core(again, clock)


def _status(core: ControllerCore) -> dict[str, object]:
    with open_envelope(core.status_frame(1)) as env:
        return dict(env.status.to_dict())


def test_joined_host_is_known_as_joined_after_a_restart_and_its_rejoin_matches(
    tmp_path: Path, store: ControllerStore, clock: FakeClock
) -> None:
    core = new_core(store, clock)
    a = grant(core.acquire("A", "sim"))
    _expect(core, "A", a.epoch, "op-1-000", "i-1", clock)
    _expect(core, "A", a.epoch, "op-1-001", "i-2", clock)
    _, _, h1 = worker(core, 1, "op-1-000", "i-1", credential_key="op-1-000")
    assert isinstance(h1, Host) and h1.state() == "idle"
    joined_ms = h1.joined_ms
    assert joined_ms == round(clock.wall() * 1000)

    clock.advance(120)  # past both join deadlines, while the controller is down
    store, core = _restart(tmp_path, store, clock)
    try:
        prov = FakeConn(100)
        core.add_session(prov.session(role="provisioner", instance_id="A", providers=frozenset({"sim"})))
        core.tick()
        hosts = _by_key(core)
        # The host that joined is not "expected" or "overdue": it joined (and when), and its
        # worker has not reconnected yet. The one that never joined is overdue, and only it.
        assert (hosts["op-1-000"].state(), hosts["op-1-000"].joined_ms) == ("disconnected", joined_ms)
        assert (hosts["op-1-001"].state(), hosts["op-1-001"].joined_ms) == ("overdue", 0)
        overdue = [e["host"]["instanceKey"] for e in prov.pushes("hostEvent") if e["kind"] == "joinOverdue"]
        assert overdue == ["op-1-001"]
        status_hosts = {h["instanceKey"]: h for h in _status(core)["hosts"]}  # type: ignore[attr-defined]
        assert status_hosts["op-1-000"]["joinedUnixMs"] == joined_ms
        assert status_hosts["op-1-000"]["state"] == "disconnected"

        # The worker reconnects: matched to its durable record, not made a new host.
        _, _, back = worker(core, 2, "op-1-000", "i-1", credential_key="op-1-000")
        assert isinstance(back, Host) and back.state() == "idle"
        assert (back.provider, back.op_id, back.instance_id, back.joined_ms) == ("sim", "op-1", "i-1", joined_ms)
        assert sorted(_by_key(core)) == ["op-1-000", "op-1-001"]
        assert [e["kind"] for e in prov.pushes("hostEvent") if e["host"]["instanceKey"] == "op-1-000"] == [
            "joined",
            "idleSince",
        ]
    finally:
        store.close()


def test_a_joined_host_that_does_not_rejoin_after_a_restart_is_lost(
    tmp_path: Path, store: ControllerStore, clock: FakeClock
) -> None:
    core = new_core(store, clock)
    a = grant(core.acquire("A", "sim"))
    _expect(core, "A", a.epoch, "op-1-000", "i-1", clock)
    worker(core, 1, "op-1-000", "i-1", credential_key="op-1-000")
    store, core = _restart(tmp_path, store, clock)
    try:
        clock.advance(core.lost_after - 0.5)
        core.tick()
        assert _by_key(core)["op-1-000"].state() == "disconnected"  # still within its time to rejoin
        clock.advance(1.0)
        core.tick()
        assert _by_key(core)["op-1-000"].state() == "lost"
    finally:
        store.close()


def test_a_returned_host_leaves_no_durable_record(tmp_path: Path, store: ControllerStore, clock: FakeClock) -> None:
    core = new_core(store, clock)
    a = grant(core.acquire("A", "sim"))
    _expect(core, "A", a.epoch, "op-1-000", "i-1", clock)
    worker(core, 1, "op-1-000", "i-1", credential_key="op-1-000")
    assert len(store.host_records()) == 1
    returned = fact("sim", a.epoch, kind="returned", op="op-1", instance_key="op-1-000", instance_id="i-1")
    assert isinstance(core.commit_fact("A", returned), FactRecord)
    assert store.host_records() == {}
    store, core = _restart(tmp_path, store, clock)
    try:
        assert core.host_list("sim") == []
    finally:
        store.close()


def test_a_worker_that_joined_before_its_record_is_durable_as_joined(
    tmp_path: Path, store: ControllerStore, clock: FakeClock
) -> None:
    core = new_core(store, clock)
    _, _, static = worker(core, 1, "op-1-000", "i-1")  # joins before the provisioner's record
    assert isinstance(static, Host) and static.provider == ""
    a = grant(core.acquire("A", "sim"))
    _expect(core, "A", a.epoch, "op-1-000", "i-1", clock)
    assert _by_key(core)["op-1-000"].provider == "sim"
    store, core = _restart(tmp_path, store, clock)
    try:
        host = _by_key(core)["op-1-000"]
        assert (host.state(), host.joined_ms) == ("disconnected", static.joined_ms)
    finally:
        store.close()


def test_failover_bumps_the_term_and_its_start_moves_forward(
    tmp_path: Path, store: ControllerStore, clock: FakeClock
) -> None:
    core = new_core(store, clock)
    first = round(clock.wall() * 1000)
    assert (core.term, core.term_started_ms) == (1, first)
    assert (_status(core)["term"], _status(core)["termStartedMs"]) == (1, first)
    clock.advance(42.5)
    assert core.failover() == 2
    assert (_status(core)["term"], _status(core)["termStartedMs"]) == (2, first + 42_500)
    # Durable with the term: the store holds both, and a restart is the next term, started now.
    assert (store.read_term_record().term, store.read_term_record().started_ms) == (2, first + 42_500)
    clock.advance(10)
    store, core = _restart(tmp_path, store, clock)
    try:
        assert (_status(core)["term"], _status(core)["termStartedMs"]) == (3, first + 52_500)
    finally:
        store.close()


def test_a_term_file_without_a_start_is_read_as_start_unknown(tmp_path: Path, clock: FakeClock) -> None:
    (tmp_path / "controller.term").write_text("5\n")  # written before the start was recorded
    store = ControllerStore(tmp_path)
    try:
        assert (store.read_term_record().term, store.read_term_record().started_ms) == (5, 0)
        core = new_core(store, clock)
        assert (core.term, core.term_started_ms) == (6, round(clock.wall() * 1000))
    finally:
        store.close()
