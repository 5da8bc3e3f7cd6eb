"""hostClose drains (closed at once when idle, closing until the work ends when busy) and
hostDecommission never removes a host running work without force."""

from __future__ import annotations

from pathlib import Path

from simctl_fakes import FakeConn, demand_of, fact, grant, new_core, worker

from orchestrator.sim.controller.clock import FakeClock
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.state import ErrorV, Host
from orchestrator.sim.controller.store import ControllerStore, FactRecord

WORK_S = 10.0


def _two_hosts_one_busy(core: ControllerCore, clock: FakeClock) -> tuple[tuple[int, int], FakeConn, Host, Host]:
    """Two joined hosts of ``cpu``; one runs a 10 s work item. Returns (epoch, provisioner, idle, busy)."""
    prov = FakeConn(100)
    core.add_session(prov.session(role="provisioner", instance_id="A", providers=frozenset({"sim"})))
    a = grant(core.acquire("A", "sim"))
    deadline = int((clock.wall() + 60) * 1000)
    for i in range(2):
        key = f"op-1-00{i}"
        r = core.commit_fact(
            "A",
            fact("sim", a.epoch, kind="expectedHost", instance_key=key, instance_id=f"i-{i}", host_name=key,
                 template="cpu", join_deadline_ms=deadline),
        )  # fmt: skip
        assert isinstance(r, FactRecord)
        worker(core, i + 1, key, f"i-{i}", credential_key=key)
    core.submit("cpu", 1, WORK_S)
    hosts = core.hosts.values()
    busy = next(h for h in hosts if h.state() == "busy")
    idle = next(h for h in hosts if h.state() == "idle")
    return a.epoch, prov, idle, busy


def _events(prov: FakeConn, host: Host) -> list[tuple[str, str]]:
    mine = (e for e in prov.pushes("hostEvent") if e["host"]["instanceId"] == host.instance_id)
    return [(e["kind"], e["host"]["state"]) for e in mine]


def test_idle_host_closes_at_once_and_busy_host_drains_first(core: ControllerCore, clock: FakeClock) -> None:
    epoch, prov, idle, busy = _two_hosts_one_busy(core, clock)
    assert core.close_host("A", "sim", epoch, idle.instance_id, "") == "closed"
    assert idle.state() == "closed" and _events(prov, idle)[-1] == ("closed", "closed")
    assert core.close_host("A", "sim", epoch, busy.instance_id, "") == "closing"
    assert busy.state() == "closing" and _events(prov, busy)[-1] == ("closing", "closing")
    assert core.close_host("A", "sim", epoch, busy.instance_id, "") == "closing"  # idempotent
    # No new work starts on either: a new item stays pending and wants a host.
    core.submit("cpu", 1, WORK_S)
    assert demand_of(core, "cpu")["wanted"] == 1 and not idle.busy_work

    clock.advance(WORK_S)
    core.tick()
    # The work ended: closed (and idle), announced once, never given the pending item.
    assert busy.state() == "closed" and busy.busy_work == 0
    closed = [e for e in prov.pushes("hostEvent") if e["host"]["instanceId"] == busy.instance_id][-1]
    assert (closed["kind"], closed["host"]["state"]) == ("closed", "closed")
    assert closed["host"]["idleSinceUnixMs"] == round(clock.wall() * 1000)
    assert ("idleSince", "closed") not in _events(prov, busy)
    assert demand_of(core, "cpu")["wanted"] == 1
    assert core.close_host("A", "sim", epoch, busy.instance_id, "") == "closed"


def test_close_survives_a_restart(tmp_path: Path, store: ControllerStore, clock: FakeClock) -> None:
    core = new_core(store, clock)
    epoch, _, idle, _ = _two_hosts_one_busy(core, clock)
    assert core.close_host("A", "sim", epoch, idle.instance_id, "") == "closed"
    store.close()
    store = ControllerStore(tmp_path)
    try:
        core = new_core(store, clock)
        prov = FakeConn(100)
        core.add_session(prov.session(role="provisioner", instance_id="A", providers=frozenset({"sim"})))
        _, _, back = worker(core, 1, idle.host_name, idle.instance_id, credential_key=idle.instance_key)
        assert isinstance(back, Host) and back.state() == "closed"
        assert _events(prov, back) == [("joined", "closed"), ("closed", "closed")]  # never offered as idle
        core.submit("cpu", 1, WORK_S)
        assert back.busy_work == 0 and demand_of(core, "cpu")["wanted"] == 1
    finally:
        store.close()


def test_decommission_of_a_busy_host_is_refused_without_force(
    core: ControllerCore, store: ControllerStore, clock: FakeClock
) -> None:
    epoch, prov, idle, busy = _two_hosts_one_busy(core, clock)
    conn = busy.session
    assert conn is not None
    refused = core.decommission_host("A", "sim", epoch, busy.instance_id, "", "scale down")
    assert isinstance(refused, ErrorV) and refused.code == "refused"
    assert busy.host_name in refused.message and "running work" in refused.message and "force" in refused.message
    # Nothing changed: still busy, still connected, its rejoin still allowed.
    assert busy.state() == "busy" and busy.session is conn
    assert not store.is_decommissioned(busy.host_name, busy.instance_id)
    # Closing does not make it removable while the work runs.
    assert core.close_host("A", "sim", epoch, busy.instance_id, "") == "closing"
    again = core.decommission_host("A", "sim", epoch, busy.instance_id, "", "scale down")
    assert isinstance(again, ErrorV) and again.code == "refused"
    # The operator says so: force stops the work and removes the host.
    assert core.decommission_host("A", "sim", epoch, busy.instance_id, "", "operator", force=True) == "decommissioned"
    assert busy.state() == "decommissioned" and store.is_decommissioned(busy.host_name, busy.instance_id)
    # An idle host needs no force.
    assert core.decommission_host("A", "sim", epoch, idle.instance_id, "", "scale down") == "decommissioned"
    assert [k for k, _ in _events(prov, idle)][-1] == "decommissioned"
