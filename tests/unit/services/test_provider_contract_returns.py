"""The provider contract's returns on the fake engine, standalone: what the cloud takes back,
returns beside a spot reclaim, a worker that stopped, and hosts the controller reports busy."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tffake import FakeEngine, FakeHosts

from orchestrator.configfile import LoadedConfig
from orchestrator.services.contract import session as session_module
from orchestrator.services.provider_contract import ProviderContract
from orchestrator.workspace.audit import AUDIT_FILE
from tests.unit.services.test_provider_contract import ask, contract, journal, standalone

WORKDIR = ("work", "unit", "sim")


def made(c: ProviderContract, count: int) -> tuple[str, list[dict[str, Any]]]:
    """A create request of ``count`` machines carried out: its id and its machines by name."""
    request = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": count}})
    assert request.exit_code == 0, request.document
    c.carry_out(request.document["requestId"])
    status = one(c, request.document["requestId"])
    assert status["status"] == "complete", status
    return request.document["requestId"], sorted(status["machines"], key=lambda m: m["name"])


def one(c: ProviderContract, request_id: str) -> dict[str, Any]:
    answer = ask(c, "getRequestStatus", {"requests": [{"requestId": request_id}]})
    assert answer.exit_code == 0, answer.document
    [status] = answer.document["requests"]
    return dict(status)


def ref(machine: dict[str, Any]) -> dict[str, str]:
    return {"name": machine["name"], "machineId": machine["machineId"]}


def reclaim(loaded: LoadedConfig, engine: FakeEngine, machine: dict[str, Any], *live: dict[str, Any]) -> str:
    """The cloud takes ``machine`` back (spot reclaim) behind Terraform's back; its instance key."""
    key = machine["machineId"].removeprefix("i-")  # the fake cloud's ids are i-<key>
    FakeEngine.vanish(loaded.config.state_dir.joinpath(*WORKDIR), key)
    engine.listed = {machine["machineId"]: ("terminated", "spot-reclaim")}
    engine.listed.update({m["machineId"]: ("running", "") for m in live})
    return key


def in_state(loaded: LoadedConfig) -> set[str]:
    return set(FakeEngine.state(loaded.config.state_dir.joinpath(*WORKDIR))["instances"])


def audit_actions(loaded: LoadedConfig) -> list[dict[str, Any]]:
    path = loaded.config.state_dir / AUDIT_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ----- item 11: getReturnRequests speaks `machine` --------------------------------------------


def test_return_requests_name_each_machine_as_machine_the_field_every_consumer_reads(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    _request, (gone, kept) = made(c, 2)
    reclaim(loaded, engine, gone, kept)
    [entry] = ask(c, "getReturnRequests", {}).document["requests"]
    assert entry == {
        "machine": gone["name"],
        "machineId": gone["machineId"],
        "gracePeriod": 0,
        "reason": "spot-reclaim",
    }


def test_return_requests_list_the_named_machines_the_cloud_no_longer_has_with_grace_zero(tmp_path: Path) -> None:
    """The host factory names the machines it holds: each one the cloud no longer has is listed,
    gracePeriod 0, whatever ended it (deleted outside the toolkit, returned by an operator), and
    one the scheduler is returning itself is not."""
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    _request, machines = made(c, 4)
    deleted, by_operator, returning, healthy = machines
    engine.listed = {m["machineId"]: ("running", "") for m in machines}
    engine.listed[deleted["machineId"]] = ("terminated", "out-of-band-delete")
    # An operator's return (not a request of the scheduler): the cloud no longer has it.
    operator = ask(c, "requestReturnMachines", {"machines": [ref(by_operator)]}).document["requestId"]
    c.carry_out(operator)
    (loaded.config.state_dir / "contract" / "requests" / f"{operator}.json").unlink()
    ask(c, "requestReturnMachines", {"machines": [ref(returning)]})  # the scheduler's own, still open
    held = {"machines": [ref(m) for m in machines]}
    answer = ask(c, "getReturnRequests", held).document
    listed = {r["machine"]: (r["gracePeriod"], r["reason"]) for r in answer["requests"]}
    assert listed == {deleted["name"]: (0, "out-of-band-delete"), by_operator["name"]: (0, "returned")}, answer
    assert healthy["name"] not in listed and returning["name"] not in listed


# ----- item 12: a return beside a spot reclaim completes by itself ------------------------------


def test_a_return_beside_a_reclaimed_machine_completes_and_the_reclaimed_key_is_recorded_lost(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    created, (gone, kept) = made(c, 2)
    key = reclaim(loaded, engine, gone, kept)
    plans_before = len(engine.planned_creates)
    back = ask(c, "requestReturnMachines", {"machines": [ref(kept)]}).document["requestId"]
    c.carry_out(back)
    status = one(c, back)
    assert status["status"] == "complete", status
    assert [(m["name"], m["result"]) for m in status["machines"]] == [(kept["name"], "succeed")]
    assert in_state(loaded) == set()  # the healthy instance deleted, the reclaimed one not re-created
    assert [f["instance_key"] for f in journal(loaded) if f["kind"] == "lost"] == [key]
    assert not any(key in keys for _where, keys in engine.planned_creates[plans_before:])
    # The reclaimed machine returned afterwards: accepted, complete at once.
    again = ask(c, "requestReturnMachines", {"machines": [ref(gone)]}).document["requestId"]
    assert one(c, again)["status"] == "complete"
    assert one(c, created)["status"] == "complete"


def test_returning_the_reclaimed_machine_itself_completes_recorded_lost(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    _created, (gone, kept) = made(c, 2)
    key = reclaim(loaded, engine, gone, kept)
    back = ask(c, "requestReturnMachines", {"machines": [ref(gone)]}).document["requestId"]
    c.carry_out(back)
    status = one(c, back)
    assert status["status"] == "complete", status
    [machine] = status["machines"]
    assert (machine["result"], machine["status"]) == ("succeed", "terminated")
    assert "spot-reclaim" in machine["message"]
    assert [f["instance_key"] for f in journal(loaded) if f["kind"] == "lost"] == [key]
    # The healthy one untouched, the reclaimed one not re-created (Terraform's state drops it
    # at the next apply that changes something).
    assert FakeEngine.present(loaded.config.state_dir.joinpath(*WORKDIR)) == {kept["machineId"].removeprefix("i-")}


def test_a_request_whose_worker_stopped_with_its_op_open_is_running_and_its_worker_is_started_again(
    tmp_path: Path,
) -> None:
    """complete_with_error is terminal for the schedulers: never while the op is open. The poll
    of a request whose worker stopped starts it again; the request then completes."""
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    _created, (first, second) = made(c, 2)
    back = ask(c, "requestReturnMachines", {"machines": [ref(first), ref(second)]}).document["requestId"]
    engine.fail_apply.add(loaded.config.state_dir.joinpath(*WORKDIR))  # the cloud refuses once
    with contextlib.suppress(Exception):
        c.carry_out(back)
    c.spawned.clear()
    status = one(c, back)
    assert status["status"] == "running", status
    assert "injected" in status["message"] and "started again" in status["message"]
    assert {m["result"] for m in status["machines"]} == {"executing"}
    assert c.spawned == [back]
    c.carry_out(back)
    assert one(c, back)["status"] == "complete"
    assert in_state(loaded) == set()


def test_a_create_whose_worker_stopped_with_its_op_open_is_running_too(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    request = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 1}}).document[
        "requestId"
    ]
    workdir = loaded.config.state_dir.joinpath(*WORKDIR)
    workdir.mkdir(parents=True, exist_ok=True)
    engine.fail_apply.add(workdir)
    with contextlib.suppress(Exception):
        c.carry_out(request)
    c.spawned.clear()
    status = one(c, request)
    assert status["status"] == "running", status
    assert c.spawned == [request]
    c.carry_out(request)
    assert one(c, request)["status"] == "complete"


# ----- item 17: a busy host is not returned unless the caller says force -------------------------


@contextlib.contextmanager
def controller_hosts(monkeypatch: pytest.MonkeyPatch, hosts: FakeHosts) -> Iterator[FakeHosts]:
    """The contract's fenced executors see ``hosts`` as the controller's (standalone has none)."""
    real = session_module.fenced_session

    @contextlib.contextmanager
    def fenced(*args: Any, **kwargs: Any) -> Iterator[Any]:
        with real(*args, **kwargs) as ops:
            ops.parts.hosts = hosts
            yield ops

    monkeypatch.setattr(session_module, "fenced_session", fenced)
    yield hosts


def test_a_busy_host_is_answered_fail_with_the_reason_and_the_others_are_returned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    _created, (busy, idle) = made(c, 2)
    busy_key, idle_key = (m["machineId"].removeprefix("i-") for m in (busy, idle))
    with controller_hosts(monkeypatch, FakeHosts({busy_key: "busy", idle_key: "idle"})):
        answer = ask(c, "requestReturnMachines", {"machines": [ref(busy), ref(idle)]})
    assert answer.exit_code == 0, answer.document
    back = answer.document["requestId"]
    assert "busy" in answer.document["message"]
    c.carry_out(back)
    status = one(c, back)
    results = {m["name"]: (m["result"], m["status"]) for m in status["machines"]}
    assert results == {busy["name"]: ("fail", "running"), idle["name"]: ("succeed", "terminated")}, status
    failed = next(m for m in status["machines"] if m["name"] == busy["name"])
    assert "busy" in failed["message"] and "force" in failed["message"]
    assert status["status"] == "complete_with_error"
    assert in_state(loaded) == {busy_key}  # the busy host still runs
    refusals = [e for e in audit_actions(loaded) if e["action"] == "op-return-refused"]
    assert [(e["op"], e["busy"]) for e in refusals] == [(back, [busy_key])]


def test_every_host_busy_is_a_request_whose_machines_all_fail_and_nothing_changes_in_the_cloud(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    _created, [busy] = made(c, 1)
    busy_key = busy["machineId"].removeprefix("i-")
    before = journal(loaded)
    with controller_hosts(monkeypatch, FakeHosts({busy_key: "closing"})):
        answer = ask(c, "requestReturnMachines", {"machines": [ref(busy)]})
    assert answer.exit_code == 0, answer.document
    assert journal(loaded) == before and c.spawned[-1] != answer.document["requestId"]
    status = one(c, answer.document["requestId"])
    assert status["status"] == "complete_with_error", status
    assert [(m["name"], m["result"]) for m in status["machines"]] == [(busy["name"], "fail")]
    assert in_state(loaded) == {busy_key}


def test_force_returns_a_busy_host_and_the_audit_log_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    _created, [busy] = made(c, 1)
    busy_key = busy["machineId"].removeprefix("i-")
    with controller_hosts(monkeypatch, FakeHosts({busy_key: "busy"})):
        answer = ask(c, "requestReturnMachines", {"machines": [ref(busy)], "force": True})
    assert answer.exit_code == 0, answer.document
    back = answer.document["requestId"]
    c.carry_out(back)
    assert one(c, back)["status"] == "complete"
    assert in_state(loaded) == set()
    forced = [e for e in audit_actions(loaded) if e["action"] == "op-return-forced"]
    assert [(e["op"], e["busy"]) for e in forced] == [(back, [busy_key])]


@pytest.mark.parametrize("force", ["yes", 1, None])
def test_force_must_be_a_boolean(tmp_path: Path, force: object) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    answer = ask(c, "requestReturnMachines", {"machines": [{"name": "h"}], "force": force})
    assert answer.exit_code == 1 and answer.document["error"]["type"] == "bad_input", answer.document
    assert "force" in answer.document["error"]["message"]
