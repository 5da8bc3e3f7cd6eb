"""Engine command lines, environment and process handling, against a fake ``terraform``.

The fake is a small Python script: it records its argv, working directory and environment,
prints a canned stdout and exits with a canned code, so no Terraform is needed here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import string
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.clients.terraform.engine import BinaryEngine, BundledEngine, engine_from_settings
from orchestrator.clients.terraform.messages import ApplyEvent, ApplyFailed, ApplyHook, Diagnostic
from orchestrator.errors import ConfigError, StaleState, TerraformError, UsageError
from orchestrator.model.config import TerraformSettings

DATA = Path(__file__).parent / "data"

FAKE = """#!{python}
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
record = {{"argv": sys.argv[1:], "cwd": os.getcwd(),
          "env": {{k: v for k, v in os.environ.items() if k.startswith(("TF_", "CHECKPOINT", "PG_"))}}}}
with open(os.path.join(here, "calls.jsonl"), "a") as f:
    f.write(json.dumps(record) + "\\n")
if os.path.exists(os.path.join(here, "sleep")):
    import signal
    def stop(signum, frame):
        with open(os.path.join(here, "signals"), "a") as f:
            f.write(str(signum) + "\\n")
        if os.path.exists(os.path.join(here, "stubborn")):
            return
        out = os.path.join(here, "stdout")
        if os.path.exists(out):
            sys.stdout.write(open(out).read())
        sys.exit(1)
    signal.signal(signal.SIGINT, stop)
    open(os.path.join(here, "ready"), "w").close()
    time.sleep(60)
out = os.path.join(here, "stdout")
if os.path.exists(out):
    sys.stdout.write(open(out).read())
sys.stderr.write(os.environ.get("FAKE_STDERR", ""))
sys.exit(int(open(os.path.join(here, "rc")).read()) if os.path.exists(os.path.join(here, "rc")) else 0)
"""


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "terraform"
    exe.write_text(FAKE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def calls(fake: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (fake.parent / "calls.jsonl").read_text().splitlines()]


def set_output(fake: Path, recorded: str, rc: int) -> None:
    (fake.parent / "stdout").write_text((DATA / recorded).read_text())
    (fake.parent / "rc").write_text(str(rc))


def test_plan_command_line_and_environment(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TF_CLI_ARGS", "-no-color")  # would corrupt -json parsing if passed on
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", "/nonexistent/terraformrc")
    monkeypatch.setenv("TF_LOG", "WARN")
    set_output(fake, "plan_module_replace_delete.jsonl", 2)
    engine = BinaryEngine(
        str(fake), cli_config=tmp_path / "terraform.rc", plugin_cache_dir=tmp_path / "cache", parallelism=7
    )
    result = engine.plan(tmp_path, var_files=[Path("desired.tfvars.json")], out=Path("burst.tfplan"))
    assert result.has_changes and result.plan_file == "burst.tfplan"
    (call,) = calls(fake)
    assert call["argv"] == [
        "plan",
        "-json",
        "-input=false",
        "-detailed-exitcode",
        "-parallelism=7",
        "-lock-timeout=60s",
        "-var-file=desired.tfvars.json",
        "-out=burst.tfplan",
    ]
    assert call["cwd"] == str(tmp_path)
    env = call["env"]
    assert isinstance(env, dict)
    assert env["TF_CLI_CONFIG_FILE"] == str(tmp_path / "terraform.rc")
    assert env["TF_PLUGIN_CACHE_DIR"] == str(tmp_path / "cache")
    assert env["TF_IN_AUTOMATION"] == "1" and env["TF_INPUT"] == "0" and env["CHECKPOINT_DISABLE"] == "1"
    assert env["TF_LOG"] == "WARN"
    assert "TF_CLI_ARGS" not in env


def test_refresh_only_and_destroy_flags(fake: Path, tmp_path: Path) -> None:
    set_output(fake, "refresh_only_drift.jsonl", 2)
    engine = BinaryEngine(str(fake))
    assert len(engine.plan(tmp_path, refresh_only=True).drift) == 2
    engine.plan(tmp_path, destroy=True)
    first, second = calls(fake)
    assert isinstance(first["argv"], list) and "-refresh-only" in first["argv"]
    assert isinstance(second["argv"], list) and "-destroy" in second["argv"]
    with pytest.raises(UsageError):
        engine.plan(tmp_path, refresh_only=True, destroy=True)


def test_no_cli_config_means_an_empty_one(fake: Path, tmp_path: Path) -> None:
    BinaryEngine(str(fake)).init(tmp_path)
    (call,) = calls(fake)
    assert call["argv"] == ["init", "-json", "-input=false", "-no-color"]
    assert isinstance(call["env"], dict)
    assert call["env"]["TF_CLI_CONFIG_FILE"] == os.devnull
    assert "TF_PLUGIN_CACHE_DIR" not in call["env"]


def test_apply_saved_plan(fake: Path, tmp_path: Path) -> None:
    set_output(fake, "apply_ok.jsonl", 0)
    result = BinaryEngine(str(fake), parallelism=3).apply(tmp_path, plan_file=Path("p.tfplan"))
    assert result.summary.add > 0
    (call,) = calls(fake)
    assert call["argv"] == [
        "apply",
        "-json",
        "-input=false",
        "-parallelism=3",
        "-lock-timeout=60s",
        "-auto-approve",
        "p.tfplan",
    ]


def test_apply_stale_and_failed(fake: Path, tmp_path: Path) -> None:
    engine = BinaryEngine(str(fake))
    set_output(fake, "apply_stale_plan.jsonl", 1)
    with pytest.raises(StaleState, match=r"^saved plan is stale: "):
        engine.apply(tmp_path, plan_file=Path("p.tfplan"))
    set_output(fake, "apply_provisioner_error.jsonl", 1)
    with pytest.raises(ApplyFailed) as err:
        engine.apply(tmp_path)
    assert err.value.result.failed


def test_apply_without_plan_needs_auto_approve(fake: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        BinaryEngine(str(fake)).apply(tmp_path, auto_approve=False)


def test_failure_without_json_uses_stderr(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (fake.parent / "rc").write_text("1")
    monkeypatch.setenv("FAKE_STDERR", "\nError: Backend initialization required\n\nplease run init\n")
    with pytest.raises(TerraformError, match=r"^Error: Backend initialization required: please run init$"):
        BinaryEngine(str(fake)).plan(tmp_path)


def test_validate_returns_errors(fake: Path, tmp_path: Path) -> None:
    set_output(fake, "validate_unsupported_argument.json", 1)
    (diag,) = BinaryEngine(str(fake)).validate(tmp_path)
    assert (diag.filename, diag.line) == ("main.tf", 3)


def test_missing_binary_and_workdir(fake: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"terraform\.binary"):
        BinaryEngine(str(tmp_path / "no-such-terraform"))
    with pytest.raises(TerraformError, match="does not exist"):
        BinaryEngine(str(fake)).plan(tmp_path / "missing")


def test_timeout_stops_the_command(fake: Path, tmp_path: Path) -> None:
    (fake.parent / "sleep").write_text("")
    engine = BinaryEngine(str(fake), timeout=1.0, stop_grace=30.0)
    with pytest.raises(TerraformError, match="did not finish within 1 s"):
        engine.plan(tmp_path)


@pytest.fixture
def python_sigint() -> Iterator[None]:
    # A process started in the background by a non-interactive shell (or some CI runners)
    # inherits SIGINT as ignored; these tests need Python's own Ctrl-C handling.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def ctrl_c_once(flag: Path) -> Iterator[None]:
    """Press Ctrl-C (SIGINT to the main thread) once ``flag`` exists, while the block runs."""
    main_ident = threading.main_thread().ident
    assert main_ident is not None
    done = threading.Event()

    def press() -> None:
        while not done.wait(0.05):
            if flag.exists():
                signal.pthread_kill(main_ident, signal.SIGINT)
                return

    helper = threading.Thread(target=press)
    helper.start()
    try:
        yield
    finally:
        done.set()
        helper.join()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_ctrl_c_is_passed_on_exactly_once(fake: Path, tmp_path: Path, python_sigint: None) -> None:
    # A second SIGINT would make Terraform abandon its state: the command runs in its own
    # session, so only the engine's single SIGINT reaches it.
    (fake.parent / "sleep").write_text("")
    with ctrl_c_once(fake.parent / "ready"), pytest.raises(KeyboardInterrupt):
        BinaryEngine(str(fake), stop_grace=30.0).apply(tmp_path)
    assert (fake.parent / "signals").read_text().split() == ["2"]


def test_should_stop_interrupts_the_apply_once_and_reports_what_it_did(fake: Path, tmp_path: Path) -> None:
    (fake.parent / "sleep").write_text("")
    set_output(fake, "apply_interrupted.jsonl", 1)
    answers: list[bool] = []

    def should_stop() -> bool:
        answers.append((fake.parent / "ready").exists())
        return answers[-1]

    engine = BinaryEngine(str(fake), stop_grace=30.0, poll_interval=0.05)
    result = engine.apply(tmp_path, plan_file=Path("p.tfplan"), should_stop=should_stop)
    assert result.interrupted
    # What the halted apply completed is reported, and its "execution halted" is not raised.
    assert sorted(c.key for c in result.changes) == ["op7-0", "op7-1"]
    assert {d.summary for d in result.diagnostics} == {"execution halted"}
    assert (fake.parent / "signals").read_text().split() == ["2"]
    # Asked until it said stop, never again once Terraform was interrupted.
    assert answers[-1] is True and answers.count(True) == 1


def test_should_stop_never_true_changes_nothing(fake: Path, tmp_path: Path) -> None:
    set_output(fake, "apply_ok.jsonl", 0)
    result = BinaryEngine(str(fake)).apply(tmp_path, plan_file=Path("p.tfplan"), should_stop=lambda: False)
    assert not result.interrupted and result.summary.add > 0
    assert not (fake.parent / "signals").exists()
    # A plain apply is not interrupted either (the default of the new field).
    assert not BinaryEngine(str(fake)).apply(tmp_path, plan_file=Path("p.tfplan")).interrupted


def test_timeout_still_applies_while_polling(fake: Path, tmp_path: Path) -> None:
    (fake.parent / "sleep").write_text("")
    engine = BinaryEngine(str(fake), timeout=1.0, stop_grace=30.0, poll_interval=0.05)
    with pytest.raises(TerraformError, match="did not finish within 1 s"):
        engine.apply(tmp_path, should_stop=lambda: False)
    assert (fake.parent / "signals").read_text().split() == ["2"]


def test_terraform_that_ignores_the_interrupt_is_killed_after_the_grace(fake: Path, tmp_path: Path) -> None:
    (fake.parent / "sleep").write_text("")
    (fake.parent / "stubborn").write_text("")
    # A grace long enough for the fake's handler to run on a loaded machine (it records the
    # signal): the kill comes after it however fast the machine is.
    engine = BinaryEngine(str(fake), stop_grace=3.0, poll_interval=0.05)
    with pytest.raises(TerraformError, match=r"did not stop within 3 s of its interrupt; killed"):
        engine.apply(tmp_path, should_stop=lambda: (fake.parent / "ready").exists())
    # One interrupt only, then the kill (a second SIGINT would abandon Terraform's state).
    assert (fake.parent / "signals").read_text().split() == ["2"]


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="needs the main thread")
def test_ctrl_c_after_a_stop_request_sends_no_second_interrupt(fake: Path, tmp_path: Path, python_sigint: None) -> None:
    (fake.parent / "sleep").write_text("")
    (fake.parent / "stubborn").write_text("")  # Terraform still busy writing its state
    engine = BinaryEngine(str(fake), stop_grace=1.0, poll_interval=0.05)
    # The Ctrl-C comes once the stop request's interrupt has arrived.
    with ctrl_c_once(fake.parent / "signals"), pytest.raises(KeyboardInterrupt):
        engine.apply(tmp_path, should_stop=lambda: (fake.parent / "ready").exists())
    assert (fake.parent / "signals").read_text().split() == ["2"]


def test_waiting_on_terraform_does_not_block_other_threads(fake: Path, tmp_path: Path) -> None:
    # While one thread waits for a (fake) long Terraform command, another keeps running,
    # as the controller link's lease renewal must.
    (fake.parent / "sleep").write_text("")
    engine = BinaryEngine(str(fake), timeout=3.0)
    ticks: list[int] = []
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(0.05):
            ticks.append(1)

    thread = threading.Thread(target=renew)
    thread.start()
    try:
        with pytest.raises(TerraformError):
            engine.apply(tmp_path)
    finally:
        stop.set()
        thread.join()
    assert len(ticks) > 5


def test_engine_from_settings(fake: Path) -> None:
    bundled = engine_from_settings(TerraformSettings(parallelism=4))
    assert isinstance(bundled, BundledEngine) and bundled.parallelism == 4
    binary = engine_from_settings(TerraformSettings(engine="binary", binary=str(fake)))
    assert isinstance(binary, BinaryEngine) and binary.command() == [str(fake)]


LOCK_PROBE = """#!{python}
import fcntl, os, sys
cache = os.environ.get("TF_PLUGIN_CACHE_DIR")
held = "no-cache"
if cache:
    with open(cache + ".lock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            held = "free"
        except BlockingIOError:
            held = "held"
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "lock-state"), "a") as f:
    f.write(sys.argv[1] + " " + held + "\\n")
"""


def test_init_holds_the_plugin_cache_lock(tmp_path: Path) -> None:
    # The fake checks from outside our process whether the cache lock is taken while it runs.
    exe = tmp_path / "terraform"
    exe.write_text(LOCK_PROBE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    engine = BinaryEngine(str(exe), plugin_cache_dir=tmp_path / "cache")
    engine.init(tmp_path)
    engine.run(tmp_path, ["plan"])
    assert (tmp_path / "lock-state").read_text().split("\n")[:2] == ["init held", "plan free"]


# LOCK_PROBE that then fails as recorded: stdout from ./stdout, stderr from ./stderr, exit 1.
FAILING_LOCK_PROBE = (
    LOCK_PROBE
    + """here = os.path.dirname(os.path.abspath(__file__))
for name, stream in (("stdout", sys.stdout), ("stderr", sys.stderr)):
    if os.path.exists(os.path.join(here, name)):
        stream.write(open(os.path.join(here, name)).read())
sys.exit(1)
"""
)


def failing_lock_probe(tmp_path: Path, stdout: str = "", stderr: str = "") -> Path:
    exe = tmp_path / "terraform"
    exe.write_text(FAILING_LOCK_PROBE.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    for name, recorded in (("stdout", stdout), ("stderr", stderr)):
        if recorded:
            (tmp_path / name).write_text((DATA / recorded).read_text())
    return exe


def lock_states(tmp_path: Path) -> list[str]:
    return (tmp_path / "lock-state").read_text().splitlines()


def test_a_command_whose_providers_went_missing_from_the_cache_runs_once_more_under_its_lock(tmp_path: Path) -> None:
    # Terraform's own -json diagnostic (recorded): another init was rewriting the cache entry.
    exe = failing_lock_probe(tmp_path, stdout="plan_providers_not_installed.jsonl")
    with pytest.raises(TerraformError, match="Required plugins are not installed"):
        BinaryEngine(str(exe), plugin_cache_dir=tmp_path / "cache").plan(tmp_path)
    # Once more, holding the lock; a second failure is the command's own (not a third run).
    assert lock_states(tmp_path) == ["plan free", "plan held"]


def test_the_plain_form_of_missing_providers_runs_once_more_too(tmp_path: Path) -> None:
    exe = failing_lock_probe(tmp_path, stderr="import_providers_not_installed.txt")
    with pytest.raises(TerraformError, match="Required plugins are not installed"):
        BinaryEngine(str(exe), plugin_cache_dir=tmp_path / "cache").import_resource(tmp_path, "a.b", "i-1")
    assert lock_states(tmp_path) == ["import free", "import held"]


def test_missing_providers_run_once_in_init_or_without_a_cache(tmp_path: Path) -> None:
    exe = failing_lock_probe(tmp_path, stdout="plan_providers_not_installed.jsonl")
    with pytest.raises(TerraformError, match="Required plugins are not installed"):
        BinaryEngine(str(exe), plugin_cache_dir=tmp_path / "cache").init(tmp_path)
    with pytest.raises(TerraformError, match="Required plugins are not installed"):
        BinaryEngine(str(exe)).plan(tmp_path)
    assert lock_states(tmp_path) == ["init held", "plan no-cache"]


def test_other_failures_run_once(tmp_path: Path) -> None:
    exe = failing_lock_probe(tmp_path, stdout="plan_unsupported_argument.jsonl")
    with pytest.raises(TerraformError, match="Unsupported argument"):
        BinaryEngine(str(exe), plugin_cache_dir=tmp_path / "cache").plan(tmp_path)
    assert lock_states(tmp_path) == ["plan free"]


def test_bundled_worker_is_importable_from_any_directory() -> None:
    env = BundledEngine().environment()
    root = env["PYTHONPATH"].split(os.pathsep)[0]
    assert (Path(root) / "orchestrator" / "clients" / "terraform" / "_worker.py").is_file()
    assert env["XCEPROV_PYTHON"] == sys.executable


def test_relative_config_paths_are_made_absolute(fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Terraform runs in the working directory; a state_dir like ".xceprov" is relative to ours.
    monkeypatch.chdir(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    BinaryEngine(str(fake), cli_config=Path(".xceprov/terraform.rc"), plugin_cache_dir=Path(".xceprov/c")).init(work)
    (call,) = calls(fake)
    assert isinstance(call["env"], dict)
    assert call["env"]["TF_CLI_CONFIG_FILE"] == str(tmp_path / ".xceprov/terraform.rc")
    assert call["env"]["TF_PLUGIN_CACHE_DIR"] == str(tmp_path / ".xceprov/c")


STREAMING = """#!{python}
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
hook = {{"resource": {{"addr": 'module.instances.xcesim_instance.this["op1-000"]', "resource_key": "op1-000",
        "resource_type": "xcesim_instance", "resource_name": "this", "module": "module.instances"}},
        "action": "create"}}
print(json.dumps({{"type": "apply_start", "hook": hook}}), flush=True)
print(json.dumps({{"type": "apply_complete", "hook": hook}}), flush=True)
# Terraform goes on with other work; the orchestrator must have seen the line by now.
deadline = time.monotonic() + 30
while not os.path.exists(os.path.join(here, "seen")) and time.monotonic() < deadline:
    time.sleep(0.02)
print(json.dumps({{"type": "log", "@message": "seen" if os.path.exists(os.path.join(here, "seen")) else "late"}}))
print(json.dumps({{"type": "change_summary", "changes": {{"add": 1, "change": 0, "remove": 0}}}}))
"""


def test_apply_events_arrive_while_terraform_runs(tmp_path: Path) -> None:
    exe = tmp_path / "terraform"
    exe.write_text(STREAMING.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    events: list[ApplyEvent] = []

    def on_event(event: ApplyEvent) -> None:
        events.append(event)
        if isinstance(event, ApplyHook) and event.stage == "complete":
            (tmp_path / "seen").write_text("")  # the fake waits for this before it goes on

    result = BinaryEngine(str(exe)).apply(tmp_path, plan_file=Path("p.tfplan"), on_event=on_event)
    assert [(e.stage, e.change.key, e.change.action) for e in events if isinstance(e, ApplyHook)] == [
        ("start", "op1-000", "create"),
        ("complete", "op1-000", "create"),
    ]
    assert result.summary.add == 1 and [c.key for c in result.changes] == ["op1-000"]


def test_apply_events_of_a_failed_apply_name_the_resource(fake: Path, tmp_path: Path) -> None:
    set_output(fake, "apply_provisioner_error.jsonl", 1)
    events: list[ApplyEvent] = []
    with pytest.raises(ApplyFailed):
        BinaryEngine(str(fake)).apply(tmp_path, on_event=events.append)
    errored = [e for e in events if isinstance(e, ApplyHook) and e.stage == "errored"]
    assert [e.change.addr for e in errored] == ["terraform_data.fail[0]"]
    [diag] = [e for e in events if isinstance(e, Diagnostic) and e.severity == "error"]
    assert diag.address == "terraform_data.fail[0]" and diag.summary == "local-exec provisioner error"


def test_interrupt_and_kill_paths_with_events(fake: Path, tmp_path: Path) -> None:
    # The reader threads of a streamed apply follow the same stop rules as communicate().
    (fake.parent / "sleep").write_text("")
    set_output(fake, "apply_interrupted.jsonl", 1)
    events: list[ApplyEvent] = []
    engine = BinaryEngine(str(fake), stop_grace=30.0, poll_interval=0.05)
    result = engine.apply(tmp_path, should_stop=lambda: (fake.parent / "ready").exists(), on_event=events.append)
    assert result.interrupted and sorted(c.key for c in result.changes) == ["op7-0", "op7-1"]
    assert sorted({e.change.key for e in events if isinstance(e, ApplyHook) and e.stage == "complete"}) == [
        "op7-0",
        "op7-1",
    ]
    (fake.parent / "signals").unlink()
    (fake.parent / "ready").unlink()
    (fake.parent / "stubborn").write_text("")
    engine = BinaryEngine(str(fake), stop_grace=3.0, poll_interval=0.05)  # time for the fake's handler
    with pytest.raises(TerraformError, match=r"did not stop within 3 s of its interrupt; killed"):
        engine.apply(tmp_path, should_stop=lambda: (fake.parent / "ready").exists(), on_event=events.append)
    assert (fake.parent / "signals").read_text().split() == ["2"]
    timed = BinaryEngine(str(fake), timeout=1.0, stop_grace=0.5, poll_interval=0.05)
    with pytest.raises(TerraformError, match="did not finish within 1 s"):
        timed.apply(tmp_path, on_event=events.append)


def test_a_lock_file_in_the_working_directory_is_used_read_only(fake: Path, tmp_path: Path) -> None:
    (tmp_path / ".terraform.lock.hcl").write_text('provider "registry.terraform.io/xce/xcesim" {}\n')
    BinaryEngine(str(fake)).init(tmp_path)
    (call,) = calls(fake)
    assert call["argv"] == ["init", "-json", "-input=false", "-no-color", "-lockfile=readonly"]


SECRET = "postgresql://xce:pw-XYZ@db.example/xceprov"


def test_the_pg_connection_is_in_the_environment_only_and_hidden_from_every_output(
    fake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = BinaryEngine(str(fake), env={"PG_CONN_STR": SECRET}, secrets=[SECRET, "pw-XYZ"], lock_timeout=600)
    engine.init(tmp_path, backend_config={"schema_name": "site_sim_0"})
    set_output(fake, "plan_module_replace_delete.jsonl", 2)
    engine.plan(tmp_path)
    (fake.parent / "stdout").unlink()
    (fake.parent / "rc").write_text("0")
    engine.migrate_state(tmp_path, backend_config={"schema_name": "site_sim_0"})
    init, plan, migrate = calls(fake)
    assert init["argv"][:1] == ["init"] and "-backend-config=schema_name=site_sim_0" in init["argv"]
    assert "-lock-timeout=600s" in plan["argv"]  # a second writer waits for the state lock
    assert migrate["argv"][:1] == ["init"] and {"-migrate-state", "-force-copy"} <= set(migrate["argv"])
    assert "-json" not in migrate["argv"]  # Terraform refuses -migrate-state with -json
    for call in (init, plan, migrate):
        assert call["env"]["PG_CONN_STR"] == SECRET  # type: ignore[index]
        assert not any("pw-XYZ" in arg for arg in call["argv"])  # type: ignore[attr-defined]
    # Terraform's own error text, were it to quote the string, reaches no message.
    (fake.parent / "rc").write_text("1")
    monkeypatch.setenv("FAKE_STDERR", f"Error: failed to connect to {SECRET}\n")
    with pytest.raises(TerraformError) as failed:
        engine.state_pull(tmp_path)
    assert "pw-XYZ" not in str(failed.value) and "***" in str(failed.value)


def test_a_line_read_while_terraform_runs_is_hidden_too(fake: Path, tmp_path: Path) -> None:
    engine = BinaryEngine(str(fake), env={"PG_CONN_STR": SECRET}, secrets=[SECRET])
    (fake.parent / "stdout").write_text(f'{{"@message": "backend {SECRET}"}}\n')
    lines: list[str] = []
    done = engine.run(tmp_path, ["apply", "-json"], on_line=lines.append)
    assert lines == ['{"@message": "backend ***"}\n'] and SECRET not in done.stdout


def go_json(value: object) -> str:
    """JSON as Terraform (Go) writes it: ``<``, ``>`` and ``&`` escaped as ``\\u003c`` and so on."""
    return json.dumps(value).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


@pytest.mark.parametrize("punctuation", [string.punctuation, string.punctuation[::-1]])
def test_a_password_terraform_quotes_json_escaped_reaches_no_error_and_no_line(
    fake: Path, tmp_path: Path, punctuation: str
) -> None:
    password = f"Pw0{punctuation}End7"
    conn_str = f"postgresql://xce:{password}@db.example/xceprov"
    # Go's url.Error: the URL quoted (%q), inside a JSON diagnostic, "<" as "\u003c".
    summary = f"parse {json.dumps(conn_str)}: net/url: invalid userinfo"
    diagnostic = {"type": "diagnostic", "diagnostic": {"severity": "error", "summary": summary, "detail": ""}}
    (fake.parent / "stdout").write_text(go_json(diagnostic) + "\n")
    (fake.parent / "rc").write_text("1")
    engine = BinaryEngine(str(fake), env={"PG_CONN_STR": conn_str}, secrets=[conn_str, password])
    with pytest.raises(TerraformError) as planned:
        engine.plan(tmp_path)
    events: list[object] = []
    with pytest.raises(TerraformError) as applied:
        engine.apply(tmp_path, on_event=events.append)
    lines: list[str] = []
    engine.run(tmp_path, ["apply", "-json"], on_line=lines.append)
    assert "Error: parse " in str(planned.value) and "***" in str(planned.value)
    for text in (str(planned.value), str(applied.value), *map(str, events), *lines):
        assert "Pw0" not in text and "End7" not in text, text
    assert [json.loads(line)["type"] for line in lines] == ["diagnostic"]  # still JSON once hidden
