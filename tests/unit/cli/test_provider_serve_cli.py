"""``xceprov provider serve`` as a caller runs it: a child process, lines on its stdin, answers on its stdout.

Only actions that read the configuration run here (``getAvailableTemplates``, an unknown
request's status), on the built-in configuration: what is tested is the process's side of the
JSON-lines mode (hostile lines where they enter, the end of input, SIGTERM, its options).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.configfile import ENV_VAR

DEADLINE = 120.0


def start(cwd: Path, *options: str, environ: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    env = {**{k: v for k, v in os.environ.items() if k != ENV_VAR}, "PYTHONFAULTHANDLER": "1", **(environ or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "provider", "serve", *options],
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=DEADLINE)


def line(rid: object, action: str, document: object = None) -> bytes:
    request: dict[str, Any] = {"id": rid, "action": action}
    if document is not None:
        request["input"] = document
    return json.dumps(request).encode() + b"\n"


def read_answer(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The next answer line (bounded: fails naming what stderr said)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], DEADLINE)
    assert ready, "no answer within the deadline"
    raw = proc.stdout.readline()
    assert raw.endswith(b"\n"), f"no whole answer line: {raw!r}; stderr: {proc.stderr.read() if proc.stderr else ''!r}"
    answer: dict[str, Any] = json.loads(raw)
    return answer


def test_hostile_lines_are_answered_and_the_stream_goes_on_to_a_clean_end(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    proc = start(tmp_path, "--max-line-bytes", "1024")
    spawned.append(proc)
    payload = b"".join(
        [
            b"\x00\xff\xfe\x89PNG binary\n",
            b'{"id": "x", "action": "requestMachines", "input": {"pad": "' + b"A" * 5000 + b'"}}\n',
            b'{"id": "y", "action": "getAvailableTemplates", "input": \n',
            line("z", "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": "2"}}),
            line("unknown", "getRequestStatus", {"requests": [{"requestId": "op-nothing"}]}),
            line("t", "getAvailableTemplates"),
        ]
    )
    out, err = proc.communicate(payload, timeout=DEADLINE)
    assert proc.returncode == 0, err.decode(errors="replace")
    answers = [json.loads(raw) for raw in out.splitlines()]
    assert len(answers) == 6, answers
    by_id: dict[object, list[dict[str, Any]]] = {}
    for answer in answers:
        by_id.setdefault(answer["id"], []).append(answer)
    nulls = by_id[None]
    assert len(nulls) == 3 and {a["error"]["type"] for a in nulls} == {"bad_input"}, nulls
    assert any("longer than 1024 bytes" in a["error"]["message"] for a in nulls)
    assert by_id["z"][0]["error"]["type"] == "bad_input"
    [unknown] = by_id["unknown"][0]["result"]["requests"]
    assert (unknown["status"], unknown["message"]) == ("complete_with_error", "Request not found")
    templates = by_id["t"][0]["result"]["templates"]
    assert "cpu.sim" in {t["templateId"] for t in templates}


def test_sigterm_stops_a_waiting_server_with_exit_0(tmp_path: Path, spawned: list[subprocess.Popen[bytes]]) -> None:
    proc = start(tmp_path)
    spawned.append(proc)
    assert proc.stdin is not None
    proc.stdin.write(line(1, "getAvailableTemplates"))
    proc.stdin.flush()
    assert read_answer(proc)["id"] == 1  # the server is in its loop, reading
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(DEADLINE)
    except subprocess.TimeoutExpired:
        # Seen once in a loaded full run and never reproduced: every thread's stack (the child
        # runs with PYTHONFAULTHANDLER) says where it waited.
        proc.send_signal(signal.SIGABRT)
        _, err = proc.communicate(timeout=DEADLINE)
        pytest.fail(f"still running {DEADLINE:.0f} s after SIGTERM; its threads:\n{err.decode(errors='replace')}")
    assert code == 0, proc.stderr.read() if proc.stderr else b""
    assert proc.stdout is not None and proc.stdout.read() == b"", "an answer after the stop"


def test_a_bad_stop_timeout_is_one_line_and_exit_2(tmp_path: Path, spawned: list[subprocess.Popen[bytes]]) -> None:
    proc = start(tmp_path, "--stop-timeout", "soon")
    spawned.append(proc)
    out, err = proc.communicate(b"", timeout=DEADLINE)
    assert proc.returncode == 2
    assert out == b""
    assert err.decode().startswith("xceprov: --stop-timeout soon: ") and err.count(b"\n") == 1, err


def test_serve_from_a_host_factorys_environment_without_its_configuration_is_one_line_and_exit_3(
    tmp_path: Path, spawned: list[subprocess.Popen[bytes]]
) -> None:
    proc = start(tmp_path, environ={"HF_CONFDIR": str(tmp_path / "hf"), "HF_PROVIDER_NAME": "inst"})
    spawned.append(proc)
    out, err = proc.communicate(line(1, "getAvailableTemplates"), timeout=DEADLINE)
    assert proc.returncode == 3 and out == b"", err
    assert str(tmp_path / "hf" / "providers" / "inst" / "xceprov.yaml") in err.decode()
    assert err.count(b"\n") == 1, err


CHILD = """
import os, subprocess, sys
from orchestrator.cli.provider_serve import private_stdio
with private_stdio() as (source, answers):
    subprocess.run(["sh", "-c", "echo forged-answer; cat"], check=True)  # a child writing and reading
    print("a stray print")
    answers.write(b'{"id":1,"result":{}}\\n')
    answers.flush()
    request = os.read(source, 100)
    sys.stderr.write("the server read: " + request.decode())
"""


def test_children_and_stray_prints_never_reach_the_answer_stream_nor_take_a_request(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], input=b"the-request\n", capture_output=True, cwd=tmp_path, timeout=DEADLINE
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b'{"id":1,"result":{}}\n'
    assert b"forged-answer" in done.stderr and b"a stray print" in done.stderr
    assert b"the server read: the-request" in done.stderr, "a child took the request"


SIGNALLED_THREAD = """
import os, select, signal, threading
from orchestrator.cli.provider_serve import signals_stop
woken_r, woken_w = os.pipe()
stops = []
def stop(name):
    stops.append(name)
    os.write(woken_w, b"x")
def signal_a_worker():
    # The kernel gives a process-directed signal to any thread that does not block it; this one
    # takes it the way a busy worker would.
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
with signals_stop(stop):
    threading.Thread(target=signal_a_worker).start()
    ready, _, _ = select.select([woken_r], [], [], 60)  # the main thread waits as the server reads
    print("stopped" if ready else "still reading", stops)
"""


def test_a_sigterm_taken_by_another_thread_stops_a_server_waiting_for_input(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SIGNALLED_THREAD], capture_output=True, cwd=tmp_path, timeout=DEADLINE, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().strip() == "stopped ['SIGTERM']", done.stdout
