"""The boot hook a bake installs (templates/xce-node-manager-first-boot.py.j2), run against files
of a temporary directory: its console line for each step, and silence without a configuration.

The template is rendered with Jinja2 and the two filters it uses, as Ansible would, with the
paths pointing into ``tmp_path`` and a stand-in control script.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2

ROLE = Path(__file__).resolve().parents[3] / "ansible" / "roles" / "xce_node_manager"
PREFIX = "XCE-FIRST-BOOT "

# A control script whose "start" records a running node manager (this test process stands in
# for it: a pid that exists) and, when asked, the worker's join outcome.
CONTROL = """#!/bin/sh
[ "$1" = start ] || exit 2
if [ -n "$FAIL_START" ]; then
  echo "node manager did not start within 30 s; see /var/log/xce/node-manager.log" >&2
  exit 1
fi
echo "$MANAGER_PID" > "$CHILD_PIDFILE"
[ -n "$JOIN_RECORD" ] && printf '%s' "$JOIN_RECORD" > "$JOIN_RESULT"
echo started
"""


def _jinja() -> jinja2.Environment:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["to_json"] = json.dumps
    env.filters["ternary"] = lambda value, yes, no: yes if value else no
    return env


def _render(tmp_path: Path, timeout: int = 5, join_result: str = "state/join-result.json") -> Path:
    text = (
        _jinja()
        .from_string((ROLE / "templates" / "xce-node-manager-first-boot.py.j2").read_text())
        .render(
            ansible_managed="Ansible managed",
            xce_node_manager_control_python=sys.executable,
            xce_node_manager_config_file=str(tmp_path / "etc/node-manager.json"),
            _xce_node_manager_mode="supervised",
            xce_node_manager_control_script=str(tmp_path / "control"),
            xce_node_manager_service_name="xce-node-manager",
            xce_node_manager_pid_file=str(tmp_path / "run/nm.pid"),
            xce_node_manager_join_result_file=str(tmp_path / join_result) if join_result else "",
            xce_node_manager_first_boot_timeout=timeout,
        )
    )
    hook = tmp_path / "50-xce-node-manager"
    hook.write_text(text)
    hook.chmod(0o755)
    control = tmp_path / "control"
    control.write_text(CONTROL)
    control.chmod(0o755)
    (tmp_path / "run").mkdir()
    (tmp_path / "state").mkdir()
    return hook


def _configure(tmp_path: Path, **changes: Any) -> None:
    (tmp_path / "etc").mkdir(exist_ok=True)
    (tmp_path / "ca.pem").write_text("CA\n")
    (tmp_path / "token").write_text("v2.9999999999.secret\n")
    config: dict[str, Any] = {
        "roles": ["worker"],
        "controller": {"addresses": ["10.0.0.1:7441"], "ca_file": str(tmp_path / "ca.pem")},
        "template": "cpu",
        "host_name": "cpu-1",
        "join_token_file": str(tmp_path / "token"),
    }
    config.update(changes)
    (tmp_path / "etc/node-manager.json").write_text(json.dumps(config))


def _run(tmp_path: Path, hook: Path, **env: str) -> tuple[int, list[dict[str, Any]], str]:
    run_env = {
        "PATH": os.environ["PATH"],
        "MANAGER_PID": str(os.getpid()),
        "CHILD_PIDFILE": str(tmp_path / "run/nm.pid.child"),
        "JOIN_RESULT": str(tmp_path / "state/join-result.json"),
        **env,
    }
    done = subprocess.run([str(hook)], capture_output=True, text=True, env=run_env, timeout=60, check=False)
    lines = [json.loads(line[len(PREFIX) :]) for line in done.stdout.splitlines() if line.startswith(PREFIX)]
    assert len(done.stdout.splitlines()) == len(lines)  # the hook prints its line and nothing else
    return done.returncode, lines, done.stdout


def _record(outcome: str, message: str, pid: int, code: str = "") -> str:
    return json.dumps({"v": 1, "outcome": outcome, "code": code, "message": message, "manager_pid": pid})


def test_without_a_configuration_the_hook_says_nothing_and_succeeds(tmp_path: Path) -> None:
    hook = _render(tmp_path)
    assert _run(tmp_path, hook) == (0, [], "")
    assert not (tmp_path / "run/nm.pid.child").exists()  # nothing started


def test_a_joined_worker_is_reported_started(tmp_path: Path) -> None:
    hook = _render(tmp_path)
    _configure(tmp_path)
    joined = _record("joined", "joined controller 10.0.0.1:7441 as cpu-1", os.getpid())
    code, lines, out = _run(tmp_path, hook, JOIN_RECORD=joined)
    assert code == 0
    assert lines == [
        {"v": 1, "outcome": "started", "step": "join", "message": "joined controller 10.0.0.1:7441 as cpu-1"}
    ]
    assert out.startswith('XCE-FIRST-BOOT {"v":1,"outcome":"started","step":"join","message":')
    assert "secret" not in out


def test_a_refused_join_is_reported_failed_with_the_controllers_message(tmp_path: Path) -> None:
    hook = _render(tmp_path)
    _configure(tmp_path)
    refused = _record("refused", "tokenExpired: host 'cpu-1': the join token expired", os.getpid(), "tokenExpired")
    code, lines, _ = _run(tmp_path, hook, JOIN_RECORD=refused)
    assert code == 1
    assert lines == [
        {"v": 1, "outcome": "failed", "step": "join", "message": "tokenExpired: host 'cpu-1': the join token expired"}
    ]


def test_an_earlier_boots_outcome_is_not_this_ones_and_the_wait_is_bounded(tmp_path: Path) -> None:
    hook = _render(tmp_path, timeout=1)
    _configure(tmp_path)
    # A record of a node manager that no longer runs (an earlier boot): never taken as this boot's.
    stale = _record("joined", "joined long ago", 0)
    code, lines, _ = _run(tmp_path, hook, JOIN_RECORD=stale)
    assert code == 1
    assert lines == [
        {
            "v": 1,
            "outcome": "failed",
            "step": "join",
            "message": "no join within 1 s: no answer from the controller yet",
        }
    ]
    # The worker's last error is what the failed join says.
    error = _record("error", "controller 10.0.0.1:7441: [Errno 111] Connection refused", os.getpid())
    _, lines, _ = _run(tmp_path, hook, JOIN_RECORD=error)
    assert lines[0]["message"] == "no join within 1 s: controller 10.0.0.1:7441: [Errno 111] Connection refused"


def test_a_node_manager_that_does_not_start_is_reported_at_the_start_step(tmp_path: Path) -> None:
    hook = _render(tmp_path)
    _configure(tmp_path)
    code, lines, _ = _run(tmp_path, hook, FAIL_START="1")
    assert code == 1
    assert [(line["outcome"], line["step"]) for line in lines] == [("failed", "start")]
    assert lines[0]["message"].endswith(
        "start failed: node manager did not start within 30 s; see /var/log/xce/node-manager.log"
    )


def test_an_unusable_configuration_is_reported_at_the_config_step_naming_file_and_key(tmp_path: Path) -> None:
    hook = _render(tmp_path)
    config = str(tmp_path / "etc/node-manager.json")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"controller": {"addresses": [], "ca_file": "x"}}, f"{config}: controller.addresses must be a non-empty list"),
        ({"host_name": ""}, f"{config}: host_name must be a non-empty string"),
        (
            {"controller": {"addresses": ["a:1"], "ca_file": "/nonexistent/ca.pem"}},
            f'{config}: controller.ca_file names "/nonexistent/ca.pem", which is not a file on this host',
        ),
        ({"join_token_file": "/nonexistent/token"}, f'{config}: join_token_file names "/nonexistent/token"'),
        ({"roles": []}, f"{config}: roles does not hold the worker role"),
    ]
    for changes, message in cases:
        _configure(tmp_path, **changes)
        code, lines, _ = _run(tmp_path, hook)
        assert code == 1 and [(line["outcome"], line["step"]) for line in lines] == [("failed", "config")], changes
        assert lines[0]["message"].startswith(message), lines[0]["message"]
    (tmp_path / "etc/node-manager.json").write_text("{not json")
    _, lines, _ = _run(tmp_path, hook)
    assert lines[0]["step"] == "config" and lines[0]["message"].startswith(f"{config}: not valid JSON")
    assert not (tmp_path / "run/nm.pid.child").exists()  # a bad configuration starts nothing


def test_the_message_is_bounded_and_the_line_is_one_line(tmp_path: Path) -> None:
    hook = _render(tmp_path)
    _configure(tmp_path)
    long = "x" * 5000 + "\nsecond line"
    code, lines, out = _run(tmp_path, hook, JOIN_RECORD=_record("refused", long, os.getpid()))
    assert code == 1 and len(lines) == 1 and len(lines[0]["message"]) == 1000
    assert len(out.encode()) < 4096 and out.count("\n") == 1


def test_without_a_recorded_join_outcome_the_hook_reports_the_start(tmp_path: Path) -> None:
    hook = _render(tmp_path, join_result="")
    _configure(tmp_path)
    code, lines, _ = _run(tmp_path, hook)
    assert code == 0 and [(line["outcome"], line["step"]) for line in lines] == [("started", "start")]


def test_the_systemd_unit_starts_only_where_a_configuration_exists_and_records_the_join() -> None:
    unit = (
        _jinja()
        .from_string((ROLE / "templates" / "xce-node-manager.service.j2").read_text())
        .render(
            ansible_managed="Ansible managed",
            xce_node_manager_interpreter="",
            xce_node_manager_executable="/opt/xce/bin/xce-node-manager",
            xce_node_manager_config_file="/etc/xce/node-manager.json",
            xce_node_manager_join_result_file="/var/lib/xce/join-result.json",
        )
    )
    assert "ConditionPathExists=/etc/xce/node-manager.json\n" in unit
    assert (
        "ExecStart=/opt/xce/bin/xce-node-manager run --config /etc/xce/node-manager.json"
        " --join-result /var/lib/xce/join-result.json\n" in unit
    )
