"""The provider contract's actions on the fake engine, standalone: answers, refusals, idempotency, fencing."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tffake import ROOT, FakeEngine, site_config

from orchestrator.configfile import LoadedConfig
from orchestrator.services.contract import workerlock
from orchestrator.services.contract.schemas import OUTPUTS, ErrorOutput
from orchestrator.services.contract.worker import carry_out, spawn_worker, worker_log
from orchestrator.services.ops import fenced_session
from orchestrator.services.provider_contract import ACTIONS, SCHEMAS, ContractAnswer, ProviderContract


def standalone(tmp_path: Path, extra: str = "") -> LoadedConfig:
    loaded = site_config(tmp_path)
    config = loaded.config.model_copy(update={"standalone": True})
    return LoadedConfig(config, loaded.source, loaded.base_dir)


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def contract(loaded: LoadedConfig, engine: FakeEngine, clock: Clock | None = None) -> ProviderContract:
    made = ProviderContract(
        loaded, spawn_worker=False, bootstrap=False, toolkit_root=ROOT, engine=engine, clock=clock or Clock()
    )
    made.session.fence_wait = 0.5
    return made


def journal(loaded: LoadedConfig) -> list[dict[str, Any]]:
    path = loaded.config.state_dir / "facts" / f"{loaded.config.cluster}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def ask(c: ProviderContract, action: str, document: object) -> ContractAnswer:
    answer = c.handle(action, document)
    # Every answer is one JSON document of its published schema; an error is one line.
    text = json.dumps(answer.document)
    if "error" in answer.document:
        assert "\n" not in answer.document["error"]["message"]
        ErrorOutput.model_validate_json(text)
    else:
        OUTPUTS[action].model_validate_json(text)
    return answer


def test_templates_are_every_template_on_every_provider_with_its_limit_and_attributes(tmp_path: Path) -> None:
    loaded = standalone(tmp_path)
    answer = ask(contract(loaded, FakeEngine()), "getAvailableTemplates", b"{}")
    assert answer.exit_code == 0
    by_id = {t["templateId"]: t for t in answer.document["templates"]}
    assert set(by_id) == {"cpu.sim", "gpu.sim"}
    assert by_id["cpu.sim"]["maxNumber"] == 10
    assert by_id["cpu.sim"]["attributes"]["type"] == ["String", "X86_64"]
    assert by_id["cpu.sim"]["attributes"]["ncpus"] == ["Numeric", "1"]
    assert by_id["cpu.sim"]["attributes"]["nram"][0] == "Numeric"


def test_a_request_is_one_op_its_worker_applies_it_and_the_status_follows_it_to_the_return(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    engine.address_of = lambda key: "10.0.0." + str(int(key.rsplit("-", 1)[1]) + 5)
    c = contract(loaded, engine)
    asked = ask(c, "requestMachines", {"template": {"templateID": "cpu.sim", "machineCount": 2}})
    assert asked.exit_code == 0, asked.document
    request = asked.document["requestId"]
    # The call recorded the intent and applied nothing; its worker was asked for.
    assert [f["kind"] for f in journal(loaded)] == ["requestIntent"]
    assert journal(loaded)[0]["op_id"] == request and c.spawned == [request]
    assert FakeEngine.state(loaded.config.state_dir / "work" / "unit" / "sim")["instances"] == {}
    running = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]})
    assert running.exit_code == 0 and running.document["requests"][0]["status"] == "running"

    c.carry_out(request)
    done = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]
    assert done["status"] == "complete", done
    assert sorted(m["privateIpAddress"] for m in done["machines"]) == ["10.0.0.5", "10.0.0.6"]
    assert all(m["result"] == "succeed" and m["machineId"] and m["launchtime"] > 0 for m in done["machines"])

    names = [{"name": m["name"], "machineId": m["machineId"]} for m in done["machines"]]
    returned = ask(c, "requestReturnMachines", {"machines": names})
    assert returned.exit_code == 0, returned.document
    back = returned.document["requestId"]
    status = ask(c, "getRequestStatus", {"requests": [{"requestId": back}]}).document["requests"][0]
    assert status["status"] == "running" and {m["result"] for m in status["machines"]} == {"executing"}
    c.carry_out(back)
    status = ask(c, "getRequestStatus", {"requests": [{"requestId": back}]}).document["requests"][0]
    assert status["status"] == "complete" and {m["status"] for m in status["machines"]} == {"terminated"}
    assert FakeEngine.state(loaded.config.state_dir / "work" / "unit" / "sim")["instances"] == {}


HOSTILE: list[tuple[str, str, object]] = [
    ("wrong type of count", "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": "2"}}),
    ("boolean count", "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": True}}),
    ("fractional count", "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 1.5}}),
    ("zero count", "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 0}}),
    ("huge count", "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 10**30}}),
    ("count over the limit", "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 11}}),
    ("unknown template", "requestMachines", {"template": {"templateId": "cpu.nowhere", "machineCount": 1}}),
    ("no template", "requestMachines", {"template": {"machineCount": 1}}),
    ("template not an object", "requestMachines", {"template": "cpu.sim"}),
    ("binary", "requestMachines", b"\x00\xff\xfe\x80binary"),
    ("not JSON", "requestMachines", b"{template: cpu}"),
    ("nested thousands deep", "requestMachines", b"[" * 50_000 + b"]" * 50_000),
    ("an array", "requestMachines", b"[1, 2]"),
    ("control characters", "requestMachines", {"template": {"templateId": "cpu\n\x1b[31m", "machineCount": 1}}),
    ("no requests", "getRequestStatus", {"requests": []}),
    ("requests of wrong type", "getRequestStatus", {"requests": "op-1"}),
    ("unknown machine", "requestReturnMachines", {"machines": [{"name": "nobody", "machineId": "i-1"}]}),
    ("machines of wrong type", "requestReturnMachines", {"machines": [{"name": 7}]}),
    ("unknown action", "deleteEverything", {}),
]


@pytest.mark.parametrize(("action", "document"), [h[1:] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_documents_get_a_json_error_exit_1_and_change_nothing(
    tmp_path: Path, action: str, document: object
) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    answer = ask(contract(loaded, engine), action, document)
    assert answer.exit_code == 1, answer.document
    assert set(answer.document) == {"error", "message"}
    assert answer.document["error"]["type"] in ("bad_input", "unknown_request")
    assert "\x1b" not in answer.document["error"]["message"]
    assert journal(loaded) == []
    assert (
        not (loaded.config.state_dir / "work").exists()
        or FakeEngine.state(loaded.config.state_dir / "work" / "unit" / "sim")["instances"] == {}
    )
    assert not (loaded.config.state_dir / "contract").exists()


def test_the_same_client_token_twice_is_one_op(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    clock = Clock()
    c = contract(loaded, engine, clock)
    doc = {"template": {"templateId": "cpu.sim", "machineCount": 2}, "clientToken": "lsf-42"}
    first = ask(c, "requestMachines", doc)
    clock.now += 3600  # however late
    second = ask(c, "requestMachines", json.dumps(doc).encode())
    assert first.exit_code == second.exit_code == 0
    assert second.document["requestId"] == first.document["requestId"]
    assert "no new op" in second.document["message"]
    assert [f["kind"] for f in journal(loaded)] == ["requestIntent"]
    c.carry_out(first.document["requestId"])  # a new op is placed once the open one is applied
    other = ask(c, "requestMachines", {**doc, "clientToken": "lsf-43"})
    assert other.document["requestId"] != first.document["requestId"]


def test_unknown_and_malformed_request_ids_are_answered_not_found_and_change_nothing(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    asked = ["op-6b49d200-0123456789ab", "../../etc/passwd"]
    answer = ask(contract(loaded, engine), "getRequestStatus", {"requests": [{"requestId": r} for r in asked]})
    assert answer.exit_code == 0, answer.document
    assert [(r["requestId"], r["status"], r["message"]) for r in answer.document["requests"]] == [
        (r, "complete_with_error", "Request not found") for r in asked
    ]
    assert journal(loaded) == [] and not (loaded.config.state_dir / "contract").exists()


def test_a_count_beyond_the_room_left_is_refused(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    first = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 6}})
    assert first.exit_code == 0
    c.carry_out(first.document["requestId"])
    before = len(journal(loaded))
    refused = ask(c, "requestMachines", {"template": {"templateId": "gpu.sim", "machineCount": 5}})
    assert refused.exit_code == 1
    assert "5 machines of gpu.sim asked, 4 more fit" in refused.document["error"]["message"]
    assert len(journal(loaded)) == before


def test_a_live_holder_of_the_provider_is_refused_by_name_and_nothing_changes(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    with fenced_session(loaded, ["sim"], ROOT, engine=engine):
        answer = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 1}})
    assert answer.exit_code == 9
    assert answer.document["error"]["type"] == "held"
    assert answer.document["error"]["holder"].startswith("process ")
    assert "standalone lock" in answer.document["error"]["message"]
    assert journal(loaded) == []


def test_two_requests_at_once_on_one_provider_are_two_ops_placed_one_after_the_other_and_both_complete(
    tmp_path: Path,
) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    # Two contracts (two callers), each with its own in-process locks: only the fence is shared.
    callers = [contract(loaded, engine), contract(loaded, engine)]
    workers: list[threading.Thread] = []
    for caller in callers:
        caller.session.fence_wait = 30.0
        caller.session.spawn = worker_thread(caller, workers)
    answers: list[ContractAnswer] = []
    start = threading.Barrier(2)

    def call(c: ProviderContract, count: int) -> None:
        start.wait()
        answers.append(ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": count}}))

    threads = [threading.Thread(target=call, args=(c, n)) for c, n in zip(callers, (2, 3), strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in list(workers):
        w.join()
    assert [a.exit_code for a in answers] == [0, 0], [a.document for a in answers]
    ids = [a.document["requestId"] for a in answers]
    assert len(set(ids)) == 2
    # The second op was placed only once the first was applied: never two unapplied ops in one
    # desired set (each worker's checked plan creates exactly its own keys), and both complete.
    kinds = [(f["kind"], f["op_id"]) for f in journal(loaded) if f["kind"] in ("requestIntent", "instanceCreated")]
    first, second = (op for kind, op in kinds if kind == "requestIntent")
    assert kinds.index(("requestIntent", second)) > kinds.index(("instanceCreated", first)), kinds
    statuses = ask(callers[0], "getRequestStatus", {"requests": [{"requestId": r} for r in ids]}).document
    assert [r["status"] for r in statuses["requests"]] == ["complete", "complete"], statuses
    assert len(FakeEngine.state(loaded.config.state_dir / "work" / "unit" / "sim")["instances"]) == 5


def worker_thread(caller: ProviderContract, workers: list[threading.Thread]) -> Callable[[str], int]:
    """A spawner running each request's worker as the detached process would, in a thread."""

    def spawn(request_id: str) -> int:
        worker = threading.Thread(target=caller.carry_out, args=(request_id,))
        worker.start()
        workers.append(worker)
        return 0

    return spawn


def test_every_action_has_input_and_output_schemas() -> None:
    assert set(ACTIONS) <= set(SCHEMAS)
    for action in ACTIONS:
        assert SCHEMAS[action]["input"]["type"] == "object"
        assert SCHEMAS[action]["output"]["type"] == "object"
    assert "error" in SCHEMAS["error"]["output"]["properties"]


def test_a_repeated_request_whose_worker_is_gone_starts_it_again_and_a_lost_record_is_rebuilt(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    doc = {"template": {"templateId": "cpu.sim", "machineCount": 1}, "clientToken": "again"}
    request = ask(c, "requestMachines", doc).document["requestId"]
    record = loaded.config.state_dir / "contract" / "requests" / f"{request}.json"
    record.unlink()  # as if the first call ended between its intent and its record
    assert ask(c, "requestMachines", doc).document["requestId"] == request
    assert c.spawned == [request, request] and record.exists()
    c.carry_out(request)
    assert ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]["status"] == (
        "complete"
    )
    # Done: the same request again starts nothing.
    assert ask(c, "requestMachines", doc).document["requestId"] == request
    assert c.spawned == [request, request]


def test_return_requests_name_machines_the_cloud_takes_back_and_those_near_max_lifetime(tmp_path: Path) -> None:
    loaded = standalone(tmp_path)
    sim = loaded.config.providers["sim"].model_copy(update={"max_lifetime": 7200.0})
    policy = loaded.config.policy.model_copy(update={"lifetime_lead": 600.0})
    config = loaded.config.model_copy(update={"providers": {"sim": sim}, "policy": policy})
    loaded = LoadedConfig(config, loaded.source, loaded.base_dir)
    engine, clock = FakeEngine(), Clock()
    c = contract(loaded, engine, clock)
    request = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 2}}).document[
        "requestId"
    ]
    c.carry_out(request)
    made = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]["machines"]
    assert ask(c, "getReturnRequests", {}).document["requests"] == []
    reclaimed, kept = sorted(made, key=lambda m: m["name"])
    engine.listed = {reclaimed["machineId"]: ("terminated", "spot-reclaim"), kept["machineId"]: ("running", "")}
    clock.now += 7200 - 300  # inside the lead of max_lifetime: 300 s left
    answer = ask(c, "getReturnRequests", {}).document
    by_name = {r["machine"]: r for r in answer["requests"]}
    assert by_name[reclaimed["name"]]["gracePeriod"] == 0
    assert by_name[reclaimed["name"]]["reason"] == "spot-reclaim"
    assert by_name[kept["name"]]["reason"] == "max_lifetime"
    assert by_name[kept["name"]]["gracePeriod"] == 300
    # Only the machines the document names, when it names some (the host factory's form).
    named = ask(c, "getReturnRequests", {"machines": [{"name": kept["name"]}]}).document["requests"]
    assert [r["machine"] for r in named] == [kept["name"]]


def test_a_worker_waits_for_a_held_fence_then_completes_its_op(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    request = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 1}}).document[
        "requestId"
    ]
    record = loaded.config.state_dir / "contract" / "requests" / f"{request}.json"
    seen: list[str] = []
    with contextlib.ExitStack() as holder:
        holder.enter_context(fenced_session(loaded, ["sim"], ROOT, engine=engine))

        def sleep(_seconds: float) -> None:
            seen.append(json.loads(record.read_text())["worker_state"])
            holder.close()  # the other command ends

        c.session.sleep = sleep
        c.carry_out(request)
    assert seen == ["waiting"]
    assert json.loads(record.read_text())["worker_state"] == "done"
    status = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]
    assert status["status"] == "complete"


def test_a_failed_bootstrap_makes_its_machine_fail_and_the_request_complete_with_error(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    request = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 2}}).document[
        "requestId"
    ]
    c.carry_out(request)
    made = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]["machines"]
    good, bad = sorted(m["name"] for m in made)
    # What a worker that bootstraps records: one host bootstrapped, one whose play failed.
    path = loaded.config.state_dir / "contract" / "requests" / f"{request}.json"
    record = json.loads(path.read_text())
    record.update(bootstrap=True, hosts={good: "ok", bad: "failed: ssh: connect to host\n\x1b[31m"})
    path.write_text(json.dumps(record))
    status = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]
    results = {m["name"]: (m["result"], m["status"]) for m in status["machines"]}
    assert results == {good: ("succeed", "running"), bad: ("fail", "failed")}
    assert status["status"] == "complete_with_error"
    assert bad in status["message"] and "\n" not in status["message"] and "\x1b" not in status["message"]
    # While its worker still runs, a host without an outcome is executing.
    record.update(hosts={good: "ok"}, worker_state="running", worker_pid=os.getpid())
    path.write_text(json.dumps(record))
    status = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]
    assert status["status"] == "running"
    assert {m["name"]: m["result"] for m in status["machines"]} == {good: "succeed", bad: "executing"}


def test_a_second_worker_of_a_request_does_nothing_while_the_first_runs(tmp_path: Path) -> None:
    """One worker per request: while one holds the request's worker lock (here, as the first
    worker would), a second one, and a second spawn, change nothing and start nothing."""
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    request = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 1}}).document[
        "requestId"
    ]
    record = loaded.config.state_dir / "contract" / "requests" / f"{request}.json"
    before = record.read_bytes()
    first = workerlock.claim(loaded.config.state_dir, request)
    assert first is not None
    try:
        assert spawn_worker(loaded, request) == 0  # no process started
        assert not worker_log(loaded.config.state_dir, request).exists()
        assert carry_out(c.session, request) is None
        assert record.read_bytes() == before  # the second worker wrote nothing: status follows the first
        status = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]
        assert status["status"] == "running", status
    finally:
        os.close(first)
    # The first worker gone (its lock dropped with it): the request can be carried out.
    done = carry_out(c.session, request)
    assert done is not None and done.worker_state == "done"
    status = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]
    assert status["status"] == "complete", status


def test_a_request_beside_an_open_op_waits_then_is_refused_naming_it_and_starts_its_gone_worker(
    tmp_path: Path,
) -> None:
    """One op placed at a time: while another request's op is open, a new request waits (here
    0.5 s), then is refused ``held`` naming that request, nothing placed; the open request had
    no worker running (nor its record: its call ended between the intent and the record), so
    its record is written and its worker started again."""
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    first = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 1}}).document["requestId"]
    record = loaded.config.state_dir / "contract" / "requests" / f"{first}.json"
    record.unlink()
    before = journal(loaded)
    refused = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 2}})
    assert refused.exit_code == 9, refused.document
    assert refused.document["error"]["type"] == "held"
    assert refused.document["error"]["holder"] == f"request {first}"
    assert journal(loaded) == before
    assert c.spawned == [first, first] and record.exists()
    c.carry_out(first)
    assert ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 2}}).exit_code == 0


def test_a_return_beside_an_open_create_waits_for_it(tmp_path: Path) -> None:
    """A return placed beside an unapplied create would be planned with the create's keys: it
    waits for it (here refused after 0.5 s, nothing changed), and goes once it is applied."""
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    made = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 1}}).document["requestId"]
    c.carry_out(made)
    [machine] = ask(c, "getRequestStatus", {"requests": [{"requestId": made}]}).document["requests"][0]["machines"]
    pending = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 2}}).document[
        "requestId"
    ]
    before = journal(loaded)
    back = {"machines": [{"name": machine["name"], "machineId": machine["machineId"]}]}
    refused = ask(c, "requestReturnMachines", back)
    assert refused.exit_code == 9 and refused.document["error"]["holder"] == f"request {pending}", refused.document
    assert journal(loaded) == before
    c.carry_out(pending)
    returned = ask(c, "requestReturnMachines", back).document["requestId"]
    c.carry_out(returned)
    status = ask(c, "getRequestStatus", {"requests": [{"requestId": returned}]}).document["requests"][0]
    assert status["status"] == "complete", status
