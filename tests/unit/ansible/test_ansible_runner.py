"""Runner events folded into per-host results; artifact rotation."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.clients.ansible.artifacts import rotate_artifacts, run_environment, seal
from orchestrator.clients.ansible.runner import (
    PlayStop,
    RunnerSettings,
    RunResult,
    Strategy,
    _Collector,
    ansible_env,
    run_playbook,
)
from orchestrator.errors import AnsibleError
from orchestrator.model.progress import HostDone, ProgressEvent, TaskDone, TaskStarted
from tests.play_processes import playbooks_with

ROOT = Path(__file__).resolve().parents[3]


def _ev(event: str, host: str, task: str, **res: Any) -> dict[str, Any]:
    return {"event": event, "event_data": {"host": host, "task": task, "res": res}}


def test_collector_results_and_progress() -> None:
    seen: list[ProgressEvent] = []
    c = _Collector(["a", "b", "c", "d", "e"], seen.append, "bootstrap", "sim op1")
    c(_ev("runner_on_ok", "a", "Write config", changed=True))
    c(_ev("runner_on_ok", "a", "Start", changed=False))
    c(_ev("runner_on_ok", "b", "Start", changed=False))
    c(_ev("runner_on_ok", "c", "Write config", changed=True))
    c(_ev("runner_on_failed", "c", "Site hook", msg="site says no"))
    c(_ev("runner_on_unreachable", "d", "Wait for SSH", msg="Failed to connect to the host via ssh: refused"))
    c({"event": "playbook_on_stats", "event_data": {}})
    r = c.results
    assert (r["a"].status, r["a"].ok, r["a"].changed) == ("changed", 2, 1)
    assert r["b"].status == "ok"
    assert (r["c"].status, r["c"].task, r["c"].message) == ("failed", "Site hook", "site says no")
    assert r["d"].status == "unreachable" and "refused" in (r["d"].message or "")
    assert r["e"].status == "skipped"
    assert [p.status for p in seen if isinstance(p, TaskDone)] == [
        "changed",
        "ok",
        "ok",
        "changed",
        "failed",
        "unreachable",
    ]
    # A host that failed or was unreachable is reported at once (its outcome is final) ...
    assert [(h.host, h.outcome) for h in seen if isinstance(h, HostDone)] == [("c", "failed"), ("d", "unreachable")]
    c.finish()
    c.finish()  # ... the others once, at the end
    done = [h for h in seen if isinstance(h, HostDone)]
    assert [(h.host, h.outcome) for h in done] == [
        ("c", "failed"),
        ("d", "unreachable"),
        ("a", "changed"),
        ("b", "ok"),
        ("e", "skipped"),
    ]
    assert {h.phase for h in done} == {"bootstrap"} and {h.scope for h in done} == {"sim op1"}
    assert done[0].reason == "at task 'Site hook': site says no"
    assert done[2].reason == "" and done[4].reason == "no task ran on this host"
    # Only what a post-mortem needs goes to job_events/ (stdout keeps everything).
    assert c(_ev("runner_on_ok", "a", "x")) is False
    assert c(_ev("runner_on_failed", "a", "x", msg="m")) is True
    assert c({"event": "playbook_on_stats", "event_data": {}}) is True
    assert r["c"].describe() == "c: failed at task 'Site hook': site says no"


def test_collector_reports_each_task_start_of_each_host_and_no_outcome() -> None:
    seen: list[ProgressEvent] = []
    c = _Collector(["a", "b"], seen.append, "bootstrap", "sim op1")
    c({"event": "runner_on_start", "event_data": {"host": "a", "task": "Copy the archive"}})
    c({"event": "runner_on_start", "event_data": {"host": "b", "task": "Copy the archive"}})
    c(_ev("runner_on_failed", "b", "Copy the archive", msg="no file"))
    assert seen[:2] == [TaskStarted("a", "Copy the archive"), TaskStarted("b", "Copy the archive")]
    # A start is no outcome: the host that only started is still "no task ran" until one ends.
    assert c.results["a"].status == "skipped" and c.results["b"].task == "Copy the archive"


def test_loop_failure_names_the_failing_item() -> None:
    c = _Collector(["a"], None)
    c(
        _ev(
            "runner_on_failed",
            "a",
            "Apply roles",
            msg="All items completed",
            results=[{"failed": False}, {"failed": True, "msg": "the role 'site_x' was not found"}],
        )
    )
    assert c.results["a"].message == "the role 'site_x' was not found"


def test_ignored_errors_do_not_fail_the_host() -> None:
    c = _Collector(["a"], None)
    c({"event": "runner_on_failed", "event_data": {"host": "a", "task": "t", "ignore_errors": True, "res": {}}})
    assert c.results["a"].status == "ok"


def test_command_failure_shows_stderr() -> None:
    c = _Collector(["a"], None)
    c(_ev("runner_on_failed", "a", "Run", msg="non-zero return code", stderr="line1\nmount: permission denied"))
    assert c.results["a"].message == "non-zero return code: mount: permission denied"


def test_rotate_keeps_the_newest(tmp_path: Path) -> None:
    for i in range(5):
        d = tmp_path / f"run{i}"
        d.mkdir()
        os.utime(d, (1000 + i, 1000 + i))
    gone = rotate_artifacts(tmp_path, 2)
    assert sorted(p.name for p in gone) == ["run0", "run1", "run2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run3", "run4"]


def test_site_roles_come_first(tmp_path: Path) -> None:
    (tmp_path / "site" / "roles").mkdir(parents=True)
    s = RunnerSettings(toolkit_root=tmp_path / "tk", state_dir=tmp_path / "st", site_dir=tmp_path / "site")
    env = ansible_env(s)
    assert env["ANSIBLE_ROLES_PATH"].split(os.pathsep) == [
        str((tmp_path / "site" / "roles").resolve()),
        str(tmp_path / "tk" / "ansible" / "roles"),
    ]
    assert env["ANSIBLE_PIPELINING"] == "True" and env["ANSIBLE_CONFIG"] == str(tmp_path / "tk" / "ansible.cfg")


def test_run_environment_drops_what_was_only_inherited() -> None:
    inherited = {
        "PATH": "/usr/bin",
        "HOME": "/root",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "ANSIBLE_HASHI_VAULT_TOKEN": "tok",
        "LC_ALL": "C.UTF-8",
        "XCEPROV_SITE": "a",
        "ANSIBLE_CALLBACK_PLUGINS": "/a",
    }
    prepared = {
        **inherited,
        "ANSIBLE_CONFIG": "/tk/ansible.cfg",
        "AWX_ISOLATED_DATA_DIR": "/st/run",
        "ANSIBLE_CALLBACK_PLUGINS": "/a:/runner/callbacks",
        "PATH": "/venv/bin:/usr/bin",
    }
    env = run_environment(prepared, {"ANSIBLE_CONFIG": "/tk/ansible.cfg", "PATH": "/venv/bin:/usr/bin"}, inherited)
    assert "AWS_SECRET_ACCESS_KEY" not in env and "ANSIBLE_HASHI_VAULT_TOKEN" not in env
    assert env == {
        "PATH": "/venv/bin:/usr/bin",
        "HOME": "/root",
        "LC_ALL": "C.UTF-8",
        "XCEPROV_SITE": "a",
        "ANSIBLE_CONFIG": "/tk/ansible.cfg",
        "AWX_ISOLATED_DATA_DIR": "/st/run",
        "ANSIBLE_CALLBACK_PLUGINS": "/a:/runner/callbacks",
    }


def test_seal_makes_everything_private(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "job_events").mkdir(parents=True)
    (run / "stderr").write_text("x")
    (run / "job_events" / "1.json").write_text("{}")
    os.chmod(run / "stderr", 0o644)
    os.chmod(run / "job_events", 0o755)
    outside = tmp_path / "outside"
    outside.write_text("y")
    os.chmod(outside, 0o644)
    (run / "link").symlink_to(outside)
    seal(run)
    modes = {p.relative_to(run).as_posix(): p.lstat().st_mode & 0o777 for p in run.rglob("*") if not p.is_symlink()}
    assert modes == {"job_events": 0o700, "stderr": 0o600, "job_events/1.json": 0o600}
    assert run.stat().st_mode & 0o777 == 0o700
    assert outside.stat().st_mode & 0o777 == 0o644  # a link's target is not the run's


def test_a_run_leaves_the_callers_signal_handlers_alone(tmp_path: Path) -> None:
    """ansible-runner installs SIGTERM/SIGINT handlers of its own unless it is given a cancel
    callback: a daemon that ran one play would no longer stop on SIGTERM."""
    import signal

    from orchestrator.clients.ansible.runner import _Canceller, _run

    play = tmp_path / "play.yml"
    play.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug: {msg: here}\n")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("here ansible_connection=local\n")
    settings = RunnerSettings(toolkit_root=Path(__file__).resolve().parents[3], state_dir=tmp_path / "state")

    def ours(_signum: int, _frame: object) -> None:
        raise AssertionError("no signal is sent in this test")

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for s in before:
            signal.signal(s, ours)
        collector = _Collector(["here"], None, "bootstrap", "op1")
        (tmp_path / "pdd").mkdir()
        _run(settings, play, inventory, str(tmp_path / "pdd"), "t1", None, collector, _Canceller(None, tmp_path / "s"))
        assert collector.results["here"].status == "ok", collector.results["here"].message
        assert signal.getsignal(signal.SIGTERM) is ours and signal.getsignal(signal.SIGINT) is ours
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _local_run(
    tmp_path: Path, tasks: str, stop: PlayStop | None, timeout: float = 600.0, strategy: Strategy = "linear"
) -> RunResult:
    """``tasks`` on two local hosts, stopped by ``stop``.

    Ansible's own linear strategy by default: Mitogen gives the two "hosts" of one local
    connection the same interpreter, which runs one task at a time, so a task waiting for the
    other host's would wait for ever. Stops under Mitogen are tested on real hosts
    (tests/integration/test_bootstrap.py, test_daemon_bootstrap_stop.py).
    """
    play = tmp_path / "play.yml"
    play.write_text(f"- hosts: all\n  gather_facts: false\n  tasks:\n{tasks}")
    inventory = {
        "all": {
            "hosts": {
                h: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable} for h in ("h1", "h2")
            }
        }
    }
    settings = RunnerSettings(toolkit_root=ROOT, state_dir=tmp_path / "state", timeout=timeout, strategy=strategy)
    return run_playbook(settings, play, inventory, ["h1", "h2"], stop=stop)


@pytest.mark.parametrize(("strategy", "interpreters"), [("mitogen_linear", 1), ("linear", 3)])
def test_mitogen_runs_a_hosts_tasks_in_one_interpreter(tmp_path: Path, strategy: Strategy, interpreters: int) -> None:
    # Each task records the process that ran its module: with Mitogen one Python per host runs
    # the whole play; Ansible's own linear strategy starts one per task.
    tasks = "".join(
        f"    - {{name: Task {i}, ansible.builtin.shell: 'echo $PPID >> {tmp_path}/{{{{ inventory_hostname }}}}'}}\n"
        for i in range(3)
    )
    result = _local_run(tmp_path, tasks, None, strategy=strategy)
    assert {h: r.status for h, r in result.hosts.items()} == {"h1": "changed", "h2": "changed"}
    for host in ("h1", "h2"):
        assert len(set((tmp_path / host).read_text().split())) == interpreters


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to pin away from")
def test_mitogen_leaves_the_play_s_processes_on_every_cpu(tmp_path: Path) -> None:
    # Mitogen's own mitogen_linear pins, on a machine of 2-3 CPUs, the top-level process, every
    # worker and everything they start to one CPU and keeps another for its multiplexer; the
    # toolkit's plugin turns that off. The lookup runs in the worker, the shell in the "host"'s
    # interpreter (a child of the multiplexer, here on this machine).
    tasks = (
        "    - name: Worker\n"
        "      ansible.builtin.copy:\n"
        f"        dest: {tmp_path}/worker-{{{{ inventory_hostname }}}}\n"
        "        content: \"{{ lookup('ansible.builtin.file', '/proc/self/status') }}\"\n"
        "    - name: Module\n"
        f"      ansible.builtin.shell: cat /proc/self/status > {tmp_path}/module-{{{{ inventory_hostname }}}}\n"
    )
    result = _local_run(tmp_path, tasks, None, strategy="mitogen_linear")
    assert {h: r.status for h, r in result.hosts.items()} == {"h1": "changed", "h2": "changed"}
    ours = os.sched_getaffinity(0)
    for name in ("worker-h1", "worker-h2", "module-h1", "module-h2"):
        assert _cpus_allowed((tmp_path / name).read_text()) == ours, name


def _cpus_allowed(status: str) -> set[int]:
    """The CPUs of ``Cpus_allowed_list`` in a /proc/PID/status text (``0-1,3``)."""
    line = next(ln for ln in status.splitlines() if ln.startswith("Cpus_allowed_list:"))
    cpus: set[int] = set()
    for part in line.split(":", 1)[1].strip().split(","):
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def test_mitogen_missing_is_one_line_naming_the_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ansible_mitogen", None)  # as if the package were not installed
    with pytest.raises(AnsibleError) as info:
        _local_run(tmp_path, "    - {name: Never, ansible.builtin.command: 'true'}\n", None, strategy="mitogen_linear")
    assert "ansible.strategy: linear" in str(info.value) and "\n" not in str(info.value)
    assert not list((tmp_path / "state" / "ansible" / "artifacts").iterdir())  # no run was started


def test_a_stop_ends_the_play_after_the_running_task_and_leaves_no_ansible_playbook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = f"XCEPROV_TEST_PLAY={tmp_path}"
    monkeypatch.setenv("XCEPROV_TEST_PLAY", str(tmp_path))
    go, second = tmp_path / "go", tmp_path / "second"
    running = [tmp_path / "running-h1", tmp_path / "running-h2"]

    def asked() -> bool:
        # The stop comes while the task runs on both hosts (it waits for `go`), then lets it end.
        if all(p.exists() for p in running):
            go.touch()
            return True
        return False

    wait = f"touch {tmp_path}/running-{{{{ inventory_hostname }}}}; while [ ! -e {go} ]; do sleep 0.1; done"
    tasks = (
        f"    - {{name: Running, ansible.builtin.shell: '{wait}'}}\n"
        f"    - {{name: Never, ansible.builtin.file: {{path: '{second}', state: touch}}}}\n"
    )
    result = _local_run(tmp_path, tasks, PlayStop(asked, grace=120, reason="the test stopped it"))
    assert result.stopped and result.elapsed < 60
    assert {h: (r.status, r.message) for h, r in result.hosts.items()} == {
        "h1": ("stopped", "not finished: the test stopped it"),
        "h2": ("stopped", "not finished: the test stopped it"),
    }
    assert [r.ok for r in result.hosts.values()] == [1, 1]  # the running task ended on both hosts ...
    assert not second.exists()  # ... and the next one never started
    assert "User interrupted execution" in (result.artifact_dir / "stdout").read_text()
    assert playbooks_with(marker) == []


def test_a_task_outlasting_the_grace_is_killed_with_the_play(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"XCEPROV_TEST_PLAY={tmp_path}"
    monkeypatch.setenv("XCEPROV_TEST_PLAY", str(tmp_path))
    running = [tmp_path / "running-h1", tmp_path / "running-h2"]
    touch = f"touch {tmp_path}/running-{{{{ inventory_hostname }}}}"
    task = f"    - {{name: Long, ansible.builtin.shell: '{touch}; exec sleep 300'}}\n"
    result = _local_run(tmp_path, task, PlayStop(lambda: all(p.exists() for p in running), grace=1.0))
    assert result.stopped and result.status == "canceled" and result.elapsed < 60
    assert {r.status for r in result.hosts.values()} == {"stopped"}
    assert playbooks_with(marker) == []
    sleeping = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p) == b"sleep\x00300\x00"]
    assert sleeping == []


def test_a_run_past_its_timeout_leaves_no_worker_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"XCEPROV_TEST_PLAY={tmp_path}"
    monkeypatch.setenv("XCEPROV_TEST_PLAY", str(tmp_path))
    task = f"    - {{name: Long, ansible.builtin.shell: 'touch {tmp_path}/running; exec sleep 301'}}\n"
    result = _local_run(tmp_path, task, None, timeout=10.0)
    assert result.status == "timeout" and {r.status for r in result.hosts.values()} == {"failed"}
    assert (tmp_path / "running").exists()  # the task ran when the timeout came
    assert playbooks_with(marker) == []
    assert [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p) == b"sleep\x00301\x00"] == []


def test_a_stop_asked_for_before_the_start_runs_nothing(tmp_path: Path) -> None:
    ran = tmp_path / "ran"
    tasks = f"    - {{name: Any, ansible.builtin.file: {{path: '{ran}', state: touch}}}}\n"
    result = _local_run(tmp_path, tasks, PlayStop(lambda: True, grace=1.0))
    assert result.stopped and not ran.exists()
    assert {r.status for r in result.hosts.values()} == {"stopped"}


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""
