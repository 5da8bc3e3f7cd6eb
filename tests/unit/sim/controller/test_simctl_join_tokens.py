"""Join tokens at the controller: a token admits the first join of its host before its expiry,
binds it to the instance that joined, durably, and refuses a copy from any other instance, even
after a restart (docs/protocol.md, "Authentication and roles")."""

from __future__ import annotations

from pathlib import Path

from simctl_fakes import grant, new_core, worker

from orchestrator.sim.controller.clock import FakeClock
from orchestrator.sim.controller.core import ControllerCore
from orchestrator.sim.controller.state import ErrorV, Host
from orchestrator.sim.controller.store import ControllerStore, FactRecord, JoinBinding

KEY = "op-1-000"


def _expect(core: ControllerCore, clock: FakeClock, key: str = KEY, iid: str = "i-1") -> int:
    """Commit the expectedHost record of ``key`` (60 s to join); its deadline, unix seconds."""
    epoch = grant(core.acquire("A", "sim")).epoch
    deadline = int(clock.wall()) + 60
    r = core.commit_fact(
        "A",
        FactRecord(kind="expectedHost", provider="sim", op_id="op-1", term=epoch[0], seq=epoch[1], instance_key=key,
                   instance_id=iid, host_name=key, template="cpu", join_deadline_ms=deadline * 1000),
    )  # fmt: skip
    assert isinstance(r, FactRecord)
    return deadline


def _refused(result: object, reason: str) -> str:
    assert isinstance(result, ErrorV) and result.code == "refused", result
    assert result.message.startswith(f"{reason}: host "), result.message
    return result.message


def test_a_token_admits_one_instance_and_refuses_a_copy_from_another(core: ControllerCore, clock: FakeClock) -> None:
    deadline = _expect(core, clock)
    _, first, joined = worker(core, 1, KEY, "i-1", credential_key=KEY, token_expires=deadline)
    assert isinstance(joined, Host) and joined.state() == "idle"
    # The same token (same identity) from another instance: a copy, refused; the host stays joined.
    _, _, copy = worker(core, 2, KEY, "i-evil", credential_key=KEY, token_expires=deadline)
    message = _refused(copy, "tokenUsed")
    assert "'i-1'" in message and "'i-evil'" in message
    [host] = core.host_list("sim")
    assert host.session is first and host.state() == "idle"
    # The instance that used it reconnects (the node manager sends its token every time): admitted.
    _, again, back = worker(core, 3, KEY, "i-1", credential_key=KEY, token_expires=deadline)
    assert isinstance(back, Host) and back.session is again


def test_an_expired_token_admits_no_first_join_but_its_joined_host_rejoins(
    core: ControllerCore, clock: FakeClock
) -> None:
    deadline = _expect(core, clock)
    other = _expect(core, clock, "op-1-001", "i-2")
    _, _, joined = worker(core, 1, KEY, "i-1", credential_key=KEY, token_expires=deadline)
    assert isinstance(joined, Host)
    clock.advance(61)  # past both join deadlines
    message = _refused(
        worker(core, 2, "op-1-001", "i-2", credential_key="op-1-001", token_expires=other)[2], "tokenExpired"
    )
    assert str(other) in message
    # A host that joined before its deadline comes back after it (a controller restart, a
    # network cut): the deadline is about the first join.
    _, _, back = worker(core, 3, KEY, "i-1", credential_key=KEY, token_expires=deadline)
    assert isinstance(back, Host) and back.state() == "idle"


def test_a_used_token_stays_used_after_a_controller_restart(
    tmp_path: Path, store: ControllerStore, clock: FakeClock
) -> None:
    core = new_core(store, clock)
    deadline = _expect(core, clock)
    assert isinstance(worker(core, 1, KEY, "i-1", credential_key=KEY, token_expires=deadline)[2], Host)
    store.close()
    store = ControllerStore(tmp_path)
    try:
        core = new_core(store, clock)
        _refused(worker(core, 2, KEY, "i-evil", credential_key=KEY, token_expires=deadline)[2], "tokenUsed")
        _, _, back = worker(core, 3, KEY, "i-1", credential_key=KEY, token_expires=deadline)
        assert isinstance(back, Host) and back.state() == "idle"
    finally:
        store.close()


def test_a_used_token_of_a_returned_host_stays_refused_and_is_pruned_once_expired(
    core: ControllerCore, store: ControllerStore, clock: FakeClock
) -> None:
    deadline = _expect(core, clock)
    assert isinstance(worker(core, 1, KEY, "i-1", credential_key=KEY, token_expires=deadline)[2], Host)
    epoch = grant(core.acquire("A", "sim")).epoch
    gone = core.commit_fact(
        "A", FactRecord(kind="returned", provider="sim", op_id="op-1", term=epoch[0], seq=epoch[1],
                        instance_key=KEY, instance_id="i-1"),
    )  # fmt: skip
    assert isinstance(gone, FactRecord) and core.host_list("sim") == []
    # Its record is gone, its token is not expired: still used (another instance cannot take it).
    _refused(worker(core, 2, KEY, "i-evil", credential_key=KEY, token_expires=deadline)[2], "tokenUsed")
    # Past its expiry, the next first join prunes it: the token is refused as expired from then on.
    clock.advance(61)
    later = _expect(core, clock, "op-1-002", "i-3")
    assert isinstance(worker(core, 3, "op-1-002", "i-3", credential_key="op-1-002", token_expires=later)[2], Host)
    assert store.join_binding(KEY, KEY) is None
    assert store.join_binding("op-1-002", "op-1-002") == JoinBinding(
        "op-1-002", "op-1-002", "i-3", later * 1000, round(clock.wall() * 1000)
    )
    _refused(worker(core, 4, KEY, "i-1", credential_key=KEY, token_expires=deadline)[2], "tokenExpired")


def test_the_binding_of_a_live_host_outlives_its_expiry(
    core: ControllerCore, store: ControllerStore, clock: FakeClock
) -> None:
    deadline = _expect(core, clock)
    assert isinstance(worker(core, 1, KEY, "i-1", credential_key=KEY, token_expires=deadline)[2], Host)
    clock.advance(3600)
    later = _expect(core, clock, "op-1-002", "i-3")
    assert isinstance(worker(core, 2, "op-1-002", "i-3", credential_key="op-1-002", token_expires=later)[2], Host)
    bound = store.join_binding(KEY, KEY)
    assert bound is not None and bound.instance_id == "i-1"  # kept: its host still runs
    _refused(worker(core, 3, KEY, "i-evil", credential_key=KEY, token_expires=deadline)[2], "tokenUsed")


def test_a_later_token_of_the_host_moves_only_the_expiry(
    core: ControllerCore, store: ControllerStore, clock: FakeClock
) -> None:
    deadline = _expect(core, clock)
    assert isinstance(worker(core, 1, KEY, "i-1", credential_key=KEY, token_expires=deadline)[2], Host)
    # A re-run of the bootstrap installs a token expiring later: the same instance rejoins with it.
    assert isinstance(worker(core, 2, KEY, "i-1", credential_key=KEY, token_expires=deadline + 900)[2], Host)
    bound = store.join_binding(KEY, KEY)
    assert bound is not None and (bound.instance_id, bound.expires_ms) == ("i-1", (deadline + 900) * 1000)
    # An older token does not move it back; the new token is no more usable by another instance.
    assert isinstance(worker(core, 3, KEY, "i-1", credential_key=KEY, token_expires=deadline)[2], Host)
    assert store.join_binding(KEY, KEY) == bound
    _refused(worker(core, 4, KEY, "i-2", credential_key=KEY, token_expires=deadline + 900)[2], "tokenUsed")
