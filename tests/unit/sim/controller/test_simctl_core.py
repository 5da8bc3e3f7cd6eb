"""The simulated controller's rules, driven directly with a fake clock (no sockets)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from simctl_fakes import TTL, FakeConn, fact, grant
from simctl_fakes import demand_of as _demand
from simctl_fakes import worker as _worker

from orchestrator.protocol.framing import open_envelope
from orchestrator.sim.controller.clock import FakeClock
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.state import ErrorV, LeaseDenyV, LeaseGrantV, RejectV
from orchestrator.sim.controller.store import ControllerStore, FactRecord

# -- leases ------------------------------------------------------------------------------------


def test_grant_deny_expire_regrant(core: ControllerCore, clock: FakeClock) -> None:
    a = grant(core.acquire("A", "sim"))
    assert a.epoch == (1, 1) and a.ttl_ms == 15000
    d = core.acquire("B", "sim")
    assert isinstance(d, LeaseDenyV) and d.holder == "A" and d.reason == "held"
    assert 0 < d.retry_after_ms <= 15000
    clock.advance(TTL - 0.1)
    assert isinstance(core.acquire("B", "sim"), LeaseDenyV)
    clock.advance(0.2)
    b = grant(core.acquire("B", "sim"))
    assert b.epoch == (1, 2)
    assert isinstance(core.renew("A", "sim", a.epoch), LeaseDenyV)


def test_renew_keeps_epoch_and_extends(core: ControllerCore, clock: FakeClock) -> None:
    a = grant(core.acquire("A", "sim"))
    for _ in range(10):
        clock.advance(TTL / 3)
        assert grant(core.renew("A", "sim", a.epoch)).epoch == a.epoch
    assert core.valid_holder("sim") == ("A", a.epoch)
    stale = core.renew("A", "sim", (1, 99))
    assert isinstance(stale, LeaseDenyV) and stale.reason == "staleEpoch"
    other = core.renew("B", "sim", a.epoch)
    assert isinstance(other, LeaseDenyV) and other.reason == "notHolder"


def test_release_frees_at_once(core: ControllerCore) -> None:
    a = grant(core.acquire("A", "sim"))
    assert isinstance(core.release("B", "sim", a.epoch), LeaseDenyV)
    assert core.release("A", "sim", a.epoch) is None
    assert grant(core.acquire("B", "sim")).epoch == (1, 2)


def test_stale_epoch_fact_rejected(core: ControllerCore, clock: FakeClock) -> None:
    a = grant(core.acquire("A", "sim"))
    ok = core.commit_fact("A", fact("sim", a.epoch))
    assert isinstance(ok, FactRecord) and ok.fact_id == 1 and ok.holder == "A"
    # wrong epoch, wrong holder, expired lease, and after another holder took over
    for holder, ep in (("A", (1, 2)), ("B", a.epoch)):
        r = core.commit_fact(holder, fact("sim", ep, op="op-2"))
        assert isinstance(r, RejectV) and r.reason == "staleEpoch" and r.current_epoch == a.epoch
    clock.advance(TTL + 0.1)
    r = core.commit_fact("A", fact("sim", a.epoch, op="op-3"))
    assert isinstance(r, RejectV) and r.reason == "staleEpoch" and r.current_epoch == (0, 0)
    b = grant(core.acquire("B", "sim"))
    r = core.commit_fact("A", fact("sim", a.epoch, op="op-4"))
    assert isinstance(r, RejectV) and r.current_epoch == b.epoch
    assert [f.op_id for f in core.store.facts("sim")] == ["op-1"]


def test_fact_commit_is_idempotent_and_validated(core: ControllerCore) -> None:
    a = grant(core.acquire("A", "sim"))
    first = core.commit_fact("A", fact("sim", a.epoch, instance_key="op-1-0"))
    again = core.commit_fact("A", fact("sim", a.epoch, instance_key="op-1-0"))
    assert isinstance(first, FactRecord) and isinstance(again, FactRecord)
    assert first.fact_id == again.fact_id
    bad = core.commit_fact("A", fact("sim", a.epoch, kind="expectedHost", op="op-9"))
    assert isinstance(bad, RejectV) and bad.reason == "invalid"
    huge = core.commit_fact("A", fact("sim", a.epoch, op="op-8", detail="x" * 5000))
    assert isinstance(huge, RejectV) and huge.reason == "invalid"


def test_failover_grace_and_previous_holder_regrant(core: ControllerCore, clock: FakeClock) -> None:
    a = grant(core.acquire("A", "sim"))
    assert isinstance(core.commit_fact("A", fact("sim", a.epoch)), FactRecord)
    grant(core.acquire("B", "other"))
    conn = FakeConn(1)
    s = conn.session(role="provisioner", instance_id="A")
    core.add_session(s)
    term = core.failover()
    assert term == 2 and conn.closed
    # B (not the previous holder of "sim") waits TTL + check interval from the term start.
    d = core.acquire("B", "sim")
    assert isinstance(d, LeaseDenyV) and d.reason == "grace" and d.retry_after_ms == 16000
    # A, the holder on sim's latest committed fact, is re-granted at once, in the new term.
    a2 = grant(core.acquire("A", "sim"))
    assert a2.epoch == (2, 1)
    # The old epoch is dead in the new term.
    assert isinstance(core.commit_fact("A", fact("sim", a.epoch, op="op-2")), RejectV)
    assert isinstance(core.commit_fact("A", fact("sim", a2.epoch, op="op-2")), FactRecord)
    # "other" has no committed fact: nobody is its known previous holder, everyone waits.
    assert isinstance(core.acquire("B", "other"), LeaseDenyV)
    clock.advance(TTL + 1.0)
    assert grant(core.acquire("B", "other")).epoch == (2, 2)


def test_term_is_durable_across_restart(tmp_path: Path, clock: FakeClock) -> None:
    st = ControllerStore(tmp_path / "s")
    c1 = ControllerCore(st, clock, ttl=TTL)
    c1.failover()
    assert c1.term == 2
    st.close()
    st2 = ControllerStore(tmp_path / "s")
    c2 = ControllerCore(st2, clock, ttl=TTL)
    assert c2.term == 3  # a restart is a new term (the lease table is gone)
    assert isinstance(c2.acquire("A", "sim"), LeaseDenyV)  # and the grace applies
    st2.close()


def test_revoke_pushes_and_blocks_others_until_ttl(core: ControllerCore, clock: FakeClock) -> None:
    conn = FakeConn(1)
    core.add_session(conn.session(role="provisioner", instance_id="A", providers=frozenset({"sim"})))
    a = grant(core.acquire("A", "sim"))
    assert core.revoke("sim", "operator")
    assert conn.pushes("leaseRevoked")[0]["epoch"] == {"term": 1, "seq": 1}
    assert isinstance(core.renew("A", "sim", a.epoch), LeaseDenyV)
    assert isinstance(core.acquire("B", "sim"), LeaseDenyV)
    clock.advance(TTL)
    core.tick()
    assert isinstance(core.acquire("B", "sim"), LeaseGrantV)


@pytest.mark.parametrize("seed", range(8))
def test_two_holders_never_both_valid(tmp_path: Path, seed: int) -> None:
    """Two orchestrators competing for one provider, with stalls and failovers.

    Each holder considers its lease valid until (its last successful request's send time + TTL)
    - the best it can know - and, as the protocol requires, commits an intent fact right after
    a new grant, before any mutation. At no instant (on the controller's clock) may both
    consider themselves holders.
    """
    rng = random.Random(seed)
    clock = FakeClock()
    st = ControllerStore(tmp_path / f"s{seed}")
    core = ControllerCore(st, clock, ttl=TTL, check_interval=1.0)
    valid_until = {"A": -1.0, "B": -1.0}
    epochs: dict[str, tuple[int, int]] = {}
    stalled_until = {"A": 0.0, "B": 0.0}
    next_renew = {"A": 0.0, "B": 0.0}
    for _step in range(400):
        now = clock.monotonic()
        for name in ("A", "B"):
            if now < stalled_until[name]:
                continue
            if rng.random() < 0.01:
                stalled_until[name] = now + rng.uniform(5, 40)  # a long pause: no renewals
                continue
            holding = valid_until[name] > now
            if holding and now < next_renew[name]:
                continue
            sent = now
            r = core.renew(name, "sim", epochs[name]) if holding else core.acquire(name, "sim")
            if isinstance(r, LeaseGrantV):
                if not holding or r.epoch != epochs.get(name):
                    epochs[name] = r.epoch
                    assert isinstance(core.commit_fact(name, fact("sim", r.epoch, op=f"op-{_step}")), FactRecord)
                valid_until[name] = sent + r.ttl_ms / 1000.0
                next_renew[name] = sent + TTL / 3
            else:
                valid_until[name] = -1.0
        if rng.random() < 0.02:
            core.failover()
        clock.advance(rng.choice([0.25, 0.5, 1.0, 2.0]))
        core.tick()
        t = clock.monotonic()
        assert not (valid_until["A"] > t and valid_until["B"] > t), f"both valid at {t}"
        vh = core.valid_holder("sim")
        if vh is not None:
            other = "B" if vh[0] == "A" else "A"
            assert not valid_until[other] > t
    st.close()


# -- hosts, workload, demand -------------------------------------------------------------------


def test_demand_rises_and_falls(core: ControllerCore, clock: FakeClock) -> None:
    prov = FakeConn(100)
    core.add_session(prov.session(role="provisioner", instance_id="A", providers=frozenset({"sim"})))
    core.submit("cpu", 2, 30.0)
    assert _demand(core, "cpu")["wanted"] == 2
    seqs = [p["seq"] for p in prov.pushes("demand")]
    _worker(core, 1, "h1")
    assert _demand(core, "cpu")["wanted"] == 1
    _worker(core, 2, "h2")
    d = _demand(core, "cpu")
    assert d["wanted"] == 0 and d["busy"] == 2 and d["idle"] == 0
    clock.advance(30.0)
    core.tick()
    d = _demand(core, "cpu")
    assert d == {"wanted": 0, "idle": 2, "busy": 0, "in_flight": 0, "joined": 2}
    idle_events = [e for e in prov.pushes("hostEvent") if e["kind"] == "idleSince"]
    assert idle_events and idle_events[-1]["host"]["idleSinceUnixMs"] == int(clock.wall() * 1000)
    new_seqs = [p["seq"] for p in prov.pushes("demand")]
    assert new_seqs == sorted(new_seqs) and len(new_seqs) > len(seqs)
    last = prov.pushes("demand")[-1]
    assert [t["wanted"] for t in last["templates"]] == [0]


def test_expected_host_matched_by_instance_id_then_name(core: ControllerCore, clock: FakeClock) -> None:
    a = grant(core.acquire("A", "sim"))
    deadline = int((clock.wall() + 120) * 1000)
    for iid, name in (("i-1", "op-1-0"), ("i-2", "op-1-1")):
        r = core.commit_fact(
            "A",
            fact("sim", a.epoch, kind="expectedHost", instance_id=iid, host_name=name, template="cpu",
                 instance_key=name, join_deadline_ms=deadline),
        )  # fmt: skip
        assert isinstance(r, FactRecord)
    assert _demand(core, "cpu")["in_flight"] == 2
    # by instance id, although the host calls itself something else
    _, _, h1 = _worker(core, 1, "renamed-host", "i-1")
    assert h1.provider == "sim" and h1.instance_key == "op-1-0" and h1.state() == "idle"
    # by host name, no instance id known to the worker
    _, _, h2 = _worker(core, 2, "op-1-1", "")
    assert h2.provider == "sim" and h2.instance_id == "i-2"
    assert _demand(core, "cpu")["in_flight"] == 0
    # an unknown worker joins as a static host
    _, _, h3 = _worker(core, 3, "static-1", "")
    assert h3.provider == ""
    assert {h.host_name for h in core.host_list("sim")} == {"renamed-host", "op-1-1"}


def test_decommissioned_rejoin_refused(core: ControllerCore, store: ControllerStore, clock: FakeClock) -> None:
    a = grant(core.acquire("A", "sim"))
    core.commit_fact(
        "A",
        fact("sim", a.epoch, kind="expectedHost", instance_id="i-1", host_name="h1", template="cpu",
             join_deadline_ms=int((clock.wall() + 60) * 1000)),
    )  # fmt: skip
    conn, _, _ = _worker(core, 1, "h1", "i-1")
    assert isinstance(core.decommission_host("B", "sim", a.epoch, "i-1", "", "x"), RejectV)
    assert core.decommission_host("A", "sim", a.epoch, "i-1", "", "scale down") == "decommissioned"
    assert conn.closed == ["decommissioned"]
    assert any(_kind(f) == "workerStop" for f in conn.frames)
    _, _, again = _worker(core, 2, "h1", "i-1")
    assert isinstance(again, ErrorV) and again.code == "refused"
    # durable: a restarted controller refuses it too
    core2 = ControllerCore(store, clock, ttl=TTL)
    c = FakeConn(3)
    s = c.session()
    core2.add_session(s)
    r = core2.join_worker(s, "h1", "i-1", "cpu", {})
    assert isinstance(r, ErrorV) and r.code == "refused"


def _kind(frame: bytes) -> str:
    with open_envelope(frame) as env:
        return str(env.which())


def test_overdue_expected_host_reported(core: ControllerCore, clock: FakeClock) -> None:
    prov = FakeConn(100)
    core.add_session(prov.session(role="provisioner", instance_id="A", providers=frozenset({"sim"})))
    a = grant(core.acquire("A", "sim"))
    core.commit_fact(
        "A",
        fact("sim", a.epoch, kind="expectedHost", instance_id="i-9", host_name="late", template="cpu",
             join_deadline_ms=int((clock.wall() + 10) * 1000)),
    )  # fmt: skip
    core.tick()
    assert not [e for e in prov.pushes("hostEvent") if e["kind"] == "joinOverdue"]
    clock.advance(11)
    core.tick()
    core.tick()
    overdue = [e for e in prov.pushes("hostEvent") if e["kind"] == "joinOverdue"]
    assert len(overdue) == 1 and overdue[0]["host"]["instanceId"] == "i-9"
    assert overdue[0]["host"]["state"] == "overdue"
    assert _demand(core, "cpu")["in_flight"] == 0


def test_disconnected_worker_becomes_lost(core: ControllerCore, clock: FakeClock) -> None:
    prov = FakeConn(100)
    core.add_session(prov.session(role="provisioner", instance_id="A"))
    _, s, host = _worker(core, 1, "h1")
    core.remove_session(s)
    assert host.state() == "disconnected"
    clock.advance(core.lost_after + 0.1)
    core.tick()
    assert host.state() == "lost"
    assert [e for e in prov.pushes("hostEvent") if e["kind"] == "lost"]


def test_close_stops_new_work(core: ControllerCore, clock: FakeClock) -> None:
    a = grant(core.acquire("A", "sim"))
    core.commit_fact(
        "A",
        fact("sim", a.epoch, kind="expectedHost", instance_id="i-1", host_name="h1", template="cpu",
             join_deadline_ms=int((clock.wall() + 60) * 1000)),
    )  # fmt: skip
    _worker(core, 1, "h1", "i-1")
    assert core.close_host("A", "sim", a.epoch, "", "h1") == "closed"
    core.submit("cpu", 1, 5)
    assert _demand(core, "cpu")["wanted"] == 1
    assert isinstance(core.close_host("A", "sim", a.epoch, "i-404", ""), ErrorV)


def test_store_is_wal_with_full_sync(store: ControllerStore) -> None:
    import sqlite3

    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    with sqlite3.connect(store.db_path) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    other.close()


def test_long_state_dir_admin_socket(tmp_path: Path) -> None:
    from sim_controller_helpers import running_controller

    from orchestrator.sim.controller import admin

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    with running_controller(deep) as rc:
        assert len(str(admin.admin_socket(deep))) > 108
        assert admin.status(deep)["term"] == rc.core.term
