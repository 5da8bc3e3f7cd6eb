"""``xceprov provider serve``'s JSON-lines server: answers by id, bad lines, the end, the stop.

The contract here is a test double whose ``requestMachines`` blocks until the test releases it:
the order of answers is then decided by the test, not by the machine's speed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from orchestrator.services.provider_serve import EXIT_ABANDONED, ServeOptions, Server, ServeResult

ACTIONS = ("getAvailableTemplates", "requestMachines", "getRequestStatus")
DEADLINE = 30.0  # seconds a test waits for an answer before it fails naming what it saw


@dataclass(frozen=True)
class Answer:
    document: dict[str, Any]
    exit_code: int


class GatedContract:
    """``requestMachines`` waits for :attr:`release`; everything else answers at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[object] = []
        self.lock = threading.Lock()
        self.entered = threading.Semaphore(0)

    def handle(self, action: str, document: object) -> Answer:
        with self.lock:
            self.started.append(document)
        if action == "getRequestStatus":
            return Answer({"error": {"type": "unknown_request", "message": "no such request"}}, 1)
        if action == "requestMachines":
            self.entered.release()
            if not self.release.wait(DEADLINE):
                raise AssertionError("the test never released requestMachines")
            return Answer({"requestId": "op-1", "message": "asked"}, 0)
        return Answer({"templates": [], "echo": document}, 0)


class Sink:
    """A binary sink whose lines a test can wait for."""

    def __init__(self) -> None:
        self.data = b""
        self.cond = threading.Condition()
        self.closed = False

    def write(self, data: bytes) -> int:
        with self.cond:
            if self.closed:
                raise BrokenPipeError(32, "Broken pipe")
            self.data += data
            self.cond.notify_all()
        return len(data)

    def flush(self) -> None:
        return None

    def lines(self) -> list[dict[str, Any]]:
        with self.cond:
            assert self.data.endswith(b"\n") or not self.data, f"a partial answer line: {self.data!r}"
            return [json.loads(line) for line in self.data.splitlines()]

    def wait_lines(self, count: int) -> list[dict[str, Any]]:
        with self.cond:
            if not self.cond.wait_for(lambda: self.data.count(b"\n") >= count, DEADLINE):
                raise AssertionError(f"waited for {count} answers, saw {self.data!r}")
        return self.lines()


@dataclass
class Running:
    server: Server
    sink: Sink
    contract: GatedContract
    write_fd: int
    thread: threading.Thread
    result: list[ServeResult]

    def send(self, *lines: bytes | dict[str, Any]) -> None:
        for line in lines:
            data = line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n"
            os.write(self.write_fd, data)

    def close_input(self) -> None:
        os.close(self.write_fd)
        self.write_fd = -1

    def outcome(self) -> ServeResult:
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), f"the server did not end; answers so far: {self.sink.data!r}"
        return self.result[0]


@pytest.fixture
def serving(request: pytest.FixtureRequest) -> Iterator[Running]:
    options: dict[str, Any] = getattr(request, "param", {})
    read_fd, write_fd = os.pipe()
    contract, sink = GatedContract(), Sink()
    server = Server(contract, read_fd, sink, ServeOptions(ACTIONS, **options))  # type: ignore[arg-type]
    result: list[ServeResult] = []
    thread = threading.Thread(target=lambda: result.append(server.run()), daemon=True)
    thread.start()
    running = Running(server, sink, contract, write_fd, thread, result)
    try:
        yield running
    finally:
        contract.release.set()
        if running.write_fd >= 0:
            os.close(running.write_fd)
        thread.join(DEADLINE)
        os.close(read_fd)


def request(rid: object, action: str = "getAvailableTemplates", document: object = None) -> dict[str, Any]:
    line: dict[str, Any] = {"id": rid, "action": action}
    if document is not None:
        line["input"] = document
    return line


def test_a_fast_request_is_answered_before_a_slow_one_sent_earlier(serving: Running) -> None:
    serving.send(request("slow", "requestMachines", {"template": {"templateId": "t", "machineCount": 1}}))
    assert serving.contract.entered.acquire(timeout=DEADLINE), "requestMachines never started"
    serving.send(request(7))

    first = serving.sink.wait_lines(1)
    assert first == [{"id": 7, "result": {"templates": [], "echo": {}}}]
    serving.contract.release.set()
    both = serving.sink.wait_lines(2)
    assert both[1] == {"id": "slow", "result": {"requestId": "op-1", "message": "asked"}}
    serving.close_input()
    assert serving.outcome().exit_code == 0


def test_an_error_document_of_the_contract_is_the_error_of_its_id(serving: Running) -> None:
    serving.send(request("q", "getRequestStatus", {"requests": [{"requestId": "nope"}]}))
    assert serving.sink.wait_lines(1) == [
        {"id": "q", "error": {"type": "unknown_request", "message": "no such request"}}
    ]


@pytest.mark.parametrize(
    ("line", "answer_id", "words"),
    [
        (b"{not json\n", None, "not one JSON document"),
        (b"\xff\xfe{}\n", None, "not UTF-8"),
        (b"[1, 2]\n", None, "not an array"),
        (b'{"action": "getAvailableTemplates"}\n', None, "id: missing"),
        (b'{"id": true, "action": "getAvailableTemplates"}\n', None, "not a boolean"),
        (b'{"id": 1.5, "action": "getAvailableTemplates"}\n', None, "not a number"),
        (b'{"id": "", "action": "getAvailableTemplates"}\n', None, "1 to 256 characters"),
        (b'{"id": 1, "id": 2, "action": "getAvailableTemplates"}\n', None, "appears twice"),
        (b'{"id": NaN, "action": "getAvailableTemplates"}\n', None, "NaN is not JSON"),
        (b"[" * 100_000 + b"\n", None, "not one JSON document"),
        (b'{"id": "a", "action": "rm -rf"}\n', "a", 'action "rm -rf": no such action'),
        (b'{"id": "b", "action": 3}\n', "b", "action: a string"),
        (b'{"id": "c", "action": "getAvailableTemplates", "extra": 1}\n', "c", 'unknown key "extra"'),
    ],
)
def test_a_bad_line_is_answered_with_an_error_and_the_stream_goes_on(
    serving: Running, line: bytes, answer_id: object, words: str
) -> None:
    serving.send(line, request("after"))
    bad, after = serving.sink.wait_lines(2)
    assert bad["id"] == answer_id
    assert bad["error"]["type"] == "bad_input"
    assert words in bad["error"]["message"]
    assert after == {"id": "after", "result": {"templates": [], "echo": {}}}
    assert serving.contract.started == [{}], "a bad line reached the contract"


@pytest.mark.parametrize("serving", [{"max_line_bytes": 100}], indirect=True)
def test_a_line_over_the_bound_is_an_error_with_id_null_and_the_next_line_is_read(serving: Running) -> None:
    huge = json.dumps(request("big", document={"pad": "x" * 10_000})).encode()
    serving.send(huge[:5000])  # no newline yet: the server must not wait for the end to answer
    (refused,) = serving.sink.wait_lines(1)
    assert refused == {"id": None, "error": {"type": "bad_input", "message": refused["error"]["message"]}}
    assert "longer than 100 bytes" in refused["error"]["message"]
    serving.send(huge[5000:] + b"\n", request("next"))
    answers = serving.sink.wait_lines(2)
    assert answers[1] == {"id": "next", "result": {"templates": [], "echo": {}}}
    serving.close_input()
    assert serving.outcome().exit_code == 0
    assert len(serving.sink.lines()) == 2, "the rest of the oversized line was read as a request"


def test_blank_lines_and_crlf_are_no_requests(serving: Running) -> None:
    serving.send(b"\n   \n", json.dumps(request(1)).encode() + b"\r\n")
    serving.close_input()
    assert serving.outcome().answered == 1
    assert serving.sink.lines() == [{"id": 1, "result": {"templates": [], "echo": {}}}]


def test_end_of_input_waits_for_the_requests_in_flight(serving: Running) -> None:
    serving.send(request("slow", "requestMachines", {}))
    assert serving.contract.entered.acquire(timeout=DEADLINE)
    serving.close_input()
    serving.thread.join(0.2)
    assert serving.thread.is_alive(), "the server ended with a request in flight"
    serving.contract.release.set()
    outcome = serving.outcome()
    assert (outcome.exit_code, outcome.answered, outcome.reason) == (0, 1, "end of input")
    assert serving.sink.lines() == [{"id": "slow", "result": {"requestId": "op-1", "message": "asked"}}]


def test_a_last_line_without_newline_is_still_answered(serving: Running) -> None:
    serving.send(json.dumps(request("last")).encode())
    serving.close_input()
    assert serving.outcome().exit_code == 0
    assert serving.sink.lines() == [{"id": "last", "result": {"templates": [], "echo": {}}}]


def test_a_duplicate_of_an_id_in_flight_is_not_run_and_answered_under_null(serving: Running) -> None:
    serving.send(request("dup", "requestMachines", {"n": 1}))
    assert serving.contract.entered.acquire(timeout=DEADLINE)
    serving.send(request("dup", "requestMachines", {"n": 2}))
    (refused,) = serving.sink.wait_lines(1)
    assert refused["id"] is None
    assert '"dup" is already in use by a request in flight' in refused["error"]["message"]
    serving.contract.release.set()
    answers = serving.sink.wait_lines(2)
    assert answers[1] == {"id": "dup", "result": {"requestId": "op-1", "message": "asked"}}
    serving.send(request("dup"))  # answered: the id is free again
    assert serving.sink.wait_lines(3)[2]["id"] == "dup"
    assert serving.contract.started == [{"n": 1}, {}], "the duplicate reached the contract"


def test_integer_and_string_ids_are_different_ids(serving: Running) -> None:
    serving.send(request(1, "requestMachines", {}))
    assert serving.contract.entered.acquire(timeout=DEADLINE)
    serving.send(request("1"))
    assert serving.sink.wait_lines(1)[0]["id"] == "1"


@pytest.mark.parametrize("serving", [{"workers": 1}], indirect=True)
def test_with_every_worker_busy_the_next_request_waits_for_one(serving: Running) -> None:
    serving.send(request("slow", "requestMachines", {}), request("queued"))
    assert serving.contract.entered.acquire(timeout=DEADLINE)
    serving.thread.join(0.2)
    assert serving.sink.lines() == [], "a request ran beside the only worker's"
    serving.contract.release.set()
    assert [line["id"] for line in serving.sink.wait_lines(2)] == ["slow", "queued"]


@pytest.mark.parametrize("serving", [{"stop_timeout": 30.0}], indirect=True)
def test_a_stop_lets_the_request_in_flight_finish_and_exits_0(serving: Running) -> None:
    serving.send(request("slow", "requestMachines", {}))
    assert serving.contract.entered.acquire(timeout=DEADLINE)
    serving.server.request_stop("SIGTERM")
    serving.contract.release.set()
    outcome = serving.outcome()
    assert (outcome.exit_code, outcome.reason, outcome.abandoned) == (0, "SIGTERM", [])
    assert serving.sink.lines() == [{"id": "slow", "result": {"requestId": "op-1", "message": "asked"}}]
    serving.send(request("late"))  # nobody reads any more: never answered
    assert len(serving.sink.lines()) == 1


@pytest.mark.parametrize("serving", [{"stop_timeout": 0.0}], indirect=True)
def test_a_stop_past_its_bound_abandons_the_request_with_an_answer_saying_so(serving: Running) -> None:
    serving.send(request("slow", "requestMachines", {}))
    assert serving.contract.entered.acquire(timeout=DEADLINE)
    serving.server.request_stop("SIGTERM")
    outcome = serving.outcome()
    assert (outcome.exit_code, outcome.abandoned) == (EXIT_ABANDONED, ["slow"])
    (abandoned,) = serving.sink.lines()
    assert abandoned["id"] == "slow"
    assert abandoned["error"]["type"] == "failed"
    assert "may still take effect" in abandoned["error"]["message"]
    serving.contract.release.set()  # its late answer is not written a second time
    time.sleep(0.1)
    assert len(serving.sink.lines()) == 1


@pytest.mark.parametrize("serving", [{"workers": 1, "stop_timeout": 30.0}], indirect=True)
def test_lines_read_but_not_started_at_a_stop_are_answered_not_run(serving: Running) -> None:
    # One write, so one read: all three lines are in the server's hands; the only worker runs the first.
    serving.send(b"".join(json.dumps(request(rid, action, {})).encode() + b"\n" for rid, action in LINES))
    assert serving.contract.entered.acquire(timeout=DEADLINE)
    serving.server.request_stop("SIGTERM")
    serving.contract.release.set()
    answers = {line["id"]: line for line in serving.sink.wait_lines(3)}
    assert answers["second"]["error"] == {"type": "unavailable", "message": "not run: the server is stopping"}
    assert answers["third"]["error"]["type"] == "unavailable"
    assert answers["slow"]["result"]["requestId"] == "op-1"
    assert serving.outcome().exit_code == 0
    assert len(serving.contract.started) == 1


LINES = (("slow", "requestMachines"), ("second", "getAvailableTemplates"), ("third", "getAvailableTemplates"))


def test_an_action_that_raises_is_a_failed_answer_and_the_server_goes_on(serving: Running) -> None:
    def explode(action: str, document: object) -> Answer:
        raise RuntimeError("boom")

    serving.contract.handle = explode  # type: ignore[method-assign]
    serving.send(request("x"), request("y"))
    answers = {line["id"]: line for line in serving.sink.wait_lines(2)}
    assert answers["x"]["error"] == {"type": "failed", "message": "internal error: RuntimeError: boom"}


def test_an_answer_that_is_not_json_is_a_failed_answer_under_its_id(serving: Running) -> None:
    def not_json(action: str, document: object) -> Answer:
        return Answer({"templates": [{"pricePerHour": float("nan")}]}, 0)

    serving.contract.handle = not_json  # type: ignore[method-assign]
    serving.send(request("nan"), request("next"))
    answers = {line["id"]: line for line in serving.sink.wait_lines(2)}
    assert answers["nan"]["error"]["type"] == "failed"
    assert "not JSON" in answers["nan"]["error"]["message"]
    serving.close_input()
    assert serving.outcome().exit_code == 0, "the server hung on the request whose answer failed"


def test_a_closed_output_stops_the_server(serving: Running) -> None:
    serving.sink.closed = True
    serving.send(request("lost"))
    outcome = serving.outcome()
    assert (outcome.exit_code, outcome.reason) == (0, "the output is closed")
