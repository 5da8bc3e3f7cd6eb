"""The worker's join outcome file (joinresult.py): what a baked image's boot hook waits for.

Against the simulated controller in this process (its real TLS and join-token checks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from sim_controller_helpers import running_controller

from orchestrator.sim.nodemanager import joinresult
from orchestrator.sim.nodemanager.codes import EXIT_REFUSED
from orchestrator.sim.nodemanager.config import parse
from orchestrator.sim.nodemanager.manager import NodeManager
from orchestrator.sim.nodemanager.worker import Worker, load_schema

KEY = "op-00000001-abcdef-000"


def _worker(tmp_path: Path, address: str, ca: Path, token: str, result: Path) -> Worker:
    token_file = tmp_path / "join-token"
    token_file.write_text(token + "\n")
    config = parse(
        json.dumps(
            {
                "roles": ["worker"],
                "controller": {"addresses": [address], "ca_file": str(ca)},
                "template": "cpu",
                "host_name": "cpu-1",
                "instance_key": KEY,
                "join_token_file": str(token_file),
            }
        )
    )
    return Worker(config, load_schema(), result)


def test_a_refused_join_is_recorded_with_the_controllers_reason_code(tmp_path: Path) -> None:
    result = tmp_path / "state" / "join-result.json"
    with running_controller(tmp_path / "ctl") as ctl:
        host, port = ctl.addr
        worker = _worker(tmp_path, f"{host}:{port}", ctl.ca, "v2.1.not-a-token", result)
        assert worker.run() == EXIT_REFUSED
    record = json.loads(result.read_text())
    assert record["outcome"] == "refused" and record["code"] == "tokenMalformed"
    assert record["message"].startswith("tokenMalformed: host 'cpu-1'")
    assert record["manager_pid"] == os.getppid()  # the worker runs in this process here: its parent
    assert "v2.1.not-a-token" not in result.read_text()


def _run_until_recorded(worker: Worker, result: Path) -> dict[str, object]:
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        for _ in range(400):
            if result.exists():
                break
            worker.stop.wait(0.05)
        return dict(json.loads(result.read_text()))
    finally:
        worker.shutdown()
        thread.join(10)


def test_an_accepted_join_is_recorded_and_an_unreachable_controller_as_an_error(tmp_path: Path) -> None:
    result = tmp_path / "join-result.json"
    with running_controller(tmp_path / "ctl") as ctl:
        host, port = ctl.addr
        worker = _worker(tmp_path, f"{host}:{port}", ctl.ca, ctl.token(KEY, "cpu-1"), result)
        assert _run_until_recorded(worker, result)["outcome"] == "joined"
    # Nobody listens there any more: an error (the worker keeps trying), with the address.
    result.unlink()
    record = _run_until_recorded(_worker(tmp_path, f"{host}:{port}", ctl.ca, "x", result), result)
    assert record["outcome"] == "error" and f"controller {host}:{port}" in str(record["message"])


def test_the_refusal_code_is_the_first_word_only_when_it_is_one() -> None:
    assert joinresult.refusal_code("tokenUsed: host 'a': used") == "tokenUsed"
    assert joinresult.refusal_code("host 'a' was decommissioned") == "refused"
    assert joinresult.refusal_code("stopped by the controller: drained") == "refused"


def test_the_node_manager_passes_the_file_to_the_worker(tmp_path: Path) -> None:
    seen: list[list[str]] = []
    cfg = tmp_path / "nm.json"
    cfg.write_text(
        json.dumps(
            {
                "roles": ["worker"],
                "controller": {"addresses": ["127.0.0.1:7441"], "ca_file": "/x"},
                "template": "cpu",
                "host_name": "h",
            }
        )
    )

    def argv(_: Path) -> list[str]:
        seen.append(["true"])
        return ["true"]

    nm = NodeManager(cfg, worker_argv=argv, join_result=tmp_path / "jr.json")
    nm.reload(force=True)
    assert nm.worker is not None
    nm.worker.wait(10)
    assert nm.worker.args == ["true", "--join-result", str(tmp_path / "jr.json")]
    nm.shutdown()


def test_a_starting_node_manager_removes_an_earlier_outcome(tmp_path: Path) -> None:
    result = tmp_path / "join-result.json"
    result.write_text('{"v": 1, "outcome": "joined", "manager_pid": 1}')
    argv = [sys.executable, "-m", "orchestrator.sim.nodemanager", "run", "--config", str(tmp_path / "none.json")]
    proc = subprocess.Popen([*argv, "--join-result", str(result)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while result.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not result.exists()
    finally:
        proc.terminate()
        proc.wait(10)
