"""Running a playbook with ansible-runner: per-host progress while it runs, a typed result per host.

What every run gets: the toolkit's ``ansible.cfg`` (pipelining, ControlPersist, strict
host-key checking), the site's roles directory before the shipped one on the roles path, the
configured forks and strategy, and an overall timeout. The strategy is Mitogen's
``mitogen_linear`` unless ``ansible.strategy`` says ``linear``: the same linear order of tasks,
but one Python interpreter per host for the whole play over one ssh connection, instead of an
ssh session, a Python start and a module upload per task and host, which is most of a
bootstrap's CPU on both ends (docs/performance.md, "Where a bootstrap's time goes"). Each run's artifacts are kept under
``<state_dir>/ansible/artifacts/<ident>/`` and rotated to the newest ``keep_artifacts``: the
full ``stdout``, ``status``, ``rc``, and in ``job_events/`` the failure, unreachable, play and
stats events (not one file per successful task: see ``_KEPT_EVENTS``); without our process
environment, 0600 in 0700 directories (``artifacts``).

Hosts are selected by exact name: the run's inventory (``inventory.only_hosts``, written into
the run's private data directory and removed after it) holds only the hosts to run on, and the
play runs on all of it with no ``--limit``, so no host name is ever read as a host pattern.

A host's outcome is a result, not an exception: ``ok`` / ``changed`` / ``failed`` /
``unreachable`` (or ``skipped`` when it was never contacted, e.g. no host key could be
recorded), with the failing task and its message. Only a run that cannot start, or dies as a
whole, raises ``AnsibleError``.

A run can be stopped (:class:`PlayStop`: the daemon's SIGTERM, the command line's Ctrl-C). The
play then ends between two tasks: the runner writes the run's stop file, and the callback plugin
``callbacks/xceprov_stop.py`` ends ``ansible-playbook`` at the next task start, before any host
begins that task. A play still running ``PlayStop.grace`` seconds after the request (one task
that takes long), or told to stop at once, is killed with all its workers and their tasks
(``playkill``: ansible-runner's own kill reaches only the main process's group), and so is what a
run past its timeout leaves. Either way no ``ansible-playbook`` outlives the run, and every host
that had not failed by then is ``stopped``: not bootstrapped, no failure of its own.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from orchestrator import durable
from orchestrator.clients.ansible.artifacts import rotate_artifacts, run_environment, seal
from orchestrator.clients.ansible.inventory import INVENTORY_NAME, only_hosts, write_inventory
from orchestrator.clients.ansible.playkill import kill_all
from orchestrator.errors import AnsibleError
from orchestrator.model.progress import STOPPED, HostDone, HostOutcome, Phase, ProgressSink, TaskDone, TaskStarted

HostStatus = HostOutcome
Strategy = Literal["mitogen_linear", "linear"]
# Events written to the artifacts' job_events/ (returning True from the handler): what a
# post-mortem needs beside the full stdout, which is always kept. Skipping one JSON file per
# ok/skipped event keeps the runner's own cost down (the benchmark's ratio against a raw run).
_KEPT_EVENTS = {
    "runner_on_failed",
    "runner_on_unreachable",
    "runner_item_on_failed",
    "runner_on_async_failed",
    "playbook_on_stats",
    "playbook_on_start",
    "playbook_on_play_start",
    "error",
    "warning",
}
# Events that end a task on a host; the rest (starts, includes, items) only feed progress.
_OUTCOMES = {
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_unreachable": "unreachable",
    "runner_on_skipped": "skipped",
}
# The callback plugin that ends a play between tasks, and the variable naming its stop file.
CALLBACKS_DIR = Path(__file__).parent / "callbacks"
# The strategy plugin that runs ``ansible.strategy: mitogen_linear``, and its directory.
STRATEGY_DIR = Path(__file__).parent / "strategy"
MITOGEN_STRATEGY_PLUGIN = "xceprov_mitogen_linear"
STOP_FILE_VAR = "XCEPROV_PLAY_STOP_FILE"
# How often ansible-runner asks whether to stop while the play is quiet (its default is 5 s).
_POLL_SECONDS = 0.5


@dataclass
class HostResult:
    """The outcome of one host in one run."""

    host: str
    status: HostStatus = "ok"
    ok: int = 0
    changed: int = 0
    task: str | None = None  # the failing task (failed / unreachable)
    message: str | None = None  # why it failed

    def describe(self) -> str:
        """One line: ``host: status`` plus the failing task and reason."""
        if self.status in ("failed", "unreachable", "skipped", STOPPED) and self.message:
            where = f" at task '{self.task}'" if self.task else ""
            return f"{self.host}: {self.status}{where}: {self.message}"
        return f"{self.host}: {self.status} (ok={self.ok} changed={self.changed})"


@dataclass
class RunResult:
    """The outcome of one run: runner status, return code, where its artifacts are, and each host."""

    ident: str
    status: str
    rc: int
    artifact_dir: Path
    hosts: dict[str, HostResult] = field(default_factory=dict)
    elapsed: float = 0.0
    stopped: bool = False  # a PlayStop ended the play before it finished

    @property
    def succeeded(self) -> list[str]:
        """Hosts that ended ok or changed."""
        return sorted(h for h, r in self.hosts.items() if r.status in ("ok", "changed"))

    @property
    def failed(self) -> list[str]:
        """Hosts that failed, were unreachable or were never contacted."""
        return sorted(h for h, r in self.hosts.items() if r.status not in ("ok", "changed"))


@dataclass(frozen=True)
class RunnerSettings:
    """What the runner needs from the configuration (``ansible:`` section) and the checkout."""

    toolkit_root: Path
    state_dir: Path
    forks: int = 20
    timeout: float = 600.0
    keep_artifacts: int = 20
    site_dir: Path | None = None
    strategy: Strategy = "mitogen_linear"

    @property
    def ansible_dir(self) -> Path:
        """The shipped Ansible content."""
        return self.toolkit_root / "ansible"

    @property
    def ansible_config(self) -> Path:
        """The toolkit's one ``ansible.cfg`` (at its root, so runs by hand from there use it too)."""
        return self.toolkit_root / "ansible.cfg"

    @property
    def artifacts_dir(self) -> Path:
        """Where each run's artifacts are kept."""
        return self.state_dir / "ansible" / "artifacts"

    def roles_path(self) -> str:
        """Site roles first, so a site role of the same name overrides a shipped one."""
        paths = []
        if self.site_dir is not None and (self.site_dir / "roles").is_dir():
            paths.append(str((self.site_dir / "roles").resolve()))
        paths.append(str(self.ansible_dir / "roles"))
        return os.pathsep.join(paths)


def _never() -> bool:
    return False


@dataclass(frozen=True)
class PlayStop:
    """How a caller stops a running play (see the module docstring).

    ``requested()`` turns True once the play should end; it then ends at its next task boundary,
    or is killed ``grace`` seconds later. ``at_once()`` turning True kills it now (a second
    Ctrl-C). ``reason`` is what the stopped hosts' results say.
    """

    requested: Callable[[], bool]
    grace: float
    reason: str = "the play was stopped"
    at_once: Callable[[], bool] = _never


class _Canceller:
    """ansible-runner's ``cancel_callback``: polled while the play runs; True kills the play."""

    def __init__(self, stop: PlayStop | None, stop_file: Path) -> None:
        self._stop = stop
        self.stop_file = stop_file
        self.asked_at: float | None = None

    @property
    def entry(self) -> str:
        """The environment entry every process of the run carries (``playkill``)."""
        return f"{STOP_FILE_VAR}={self.stop_file}"

    def __call__(self) -> bool:
        if self._stop is None:
            return False
        if self.asked_at is None and self._stop.requested():
            self.asked_at = time.monotonic()
            # The plugin ends the play at the next task start (ansible-playbook checks the file).
            self.stop_file.touch()
        if self.asked_at is None:
            return False
        if self._stop.at_once() or time.monotonic() - self.asked_at >= self._stop.grace:
            kill_all(self.entry)
            return True
        return False


def strategy_env(strategy: Strategy) -> dict[str, str]:
    """The variables choosing the play's strategy (Mitogen's plugins are found where it is installed)."""
    if strategy == "linear":
        return {"ANSIBLE_STRATEGY": "linear"}
    try:
        import ansible_mitogen  # the plugin package only; Ansible loads the strategy itself
    except ImportError:
        raise AnsibleError(
            "ansible.strategy mitogen_linear needs the Python package mitogen in the toolkit's "
            "environment; install it, or set ansible.strategy: linear"
        ) from None
    # Mitogen's linear strategy through the toolkit's plugin, which turns Mitogen's CPU pinning
    # off (strategy/xceprov_mitogen_linear.py); Mitogen's own directory stays on the path after it.
    plugins = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {
        "ANSIBLE_STRATEGY": MITOGEN_STRATEGY_PLUGIN,
        "ANSIBLE_STRATEGY_PLUGINS": f"{STRATEGY_DIR}{os.pathsep}{plugins}",
    }


def ansible_env(settings: RunnerSettings) -> dict[str, str]:
    """Environment of ``ansible-playbook`` for the toolkit's runs."""
    bindir = str(Path(sys.executable).parent)
    return {
        # ansible-runner starts ansible-playbook by name: the venv's bin must be on PATH.
        "PATH": bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
        "ANSIBLE_CONFIG": str(settings.ansible_config),
        "ANSIBLE_ROLES_PATH": settings.roles_path(),
        "ANSIBLE_FORKS": str(settings.forks),
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "1",
        **strategy_env(settings.strategy),
    }


class _Collector:
    """Folds runner events into per-host results and reports progress; called from runner threads.

    Progress: a ``TaskStarted`` and a ``TaskDone`` per task and host; a ``HostDone`` as soon as a host fails or is
    unreachable (Ansible drops it from the play: its outcome is final), and for every other host
    at :meth:`finish`. With the linear strategy the hosts that go well all end with the last task.
    """

    def __init__(
        self, hosts: Sequence[str], progress: ProgressSink | None, phase: Phase = "bootstrap", scope: str = ""
    ) -> None:
        self.results = {h: HostResult(h, status="skipped", message="no task ran on this host") for h in hosts}
        self._touched: set[str] = set()
        self._reported: set[str] = set()
        self._progress = progress
        self._phase: Phase = phase
        self._scope = scope
        self._lock = threading.Lock()
        self._item_errors: dict[tuple[str, str], str] = {}

    def _report(self, r: HostResult) -> None:
        """One ``HostDone`` per host, the first time its outcome is final (the lock is held)."""
        if self._progress is None or r.host in self._reported:
            return
        self._reported.add(r.host)
        where = f"at task '{r.task}': " if r.task and r.status in ("failed", "unreachable") else ""
        reason = f"{where}{r.message}" if r.message and r.status not in ("ok", "changed") else ""
        self._progress(HostDone(self._phase, self._scope, r.host, r.status, reason))

    def finish(self) -> None:
        """Report every host whose outcome was not reported during the run."""
        with self._lock:
            for r in self.results.values():
                self._report(r)

    def __call__(self, event: Mapping[str, Any]) -> bool:
        name = event.get("event", "")
        data = event.get("event_data") or {}
        host = data.get("host")
        keep = name in _KEPT_EVENTS
        if not host:
            return keep
        task = str(data.get("task") or "")
        res = data.get("res") or {}
        if name == "runner_item_on_failed":
            self._item_errors.setdefault((host, task), _message(res))
            return keep
        if name == "runner_on_start":  # the host's current task, for the per-host progress lines
            if self._progress is not None:
                self._progress(TaskStarted(host, task))
            return keep
        outcome = _OUTCOMES.get(name)
        if outcome is None:
            return keep
        with self._lock:
            r = self.results.setdefault(host, HostResult(host))
            if host not in self._touched:
                self._touched.add(host)
                r.status, r.message = "ok", None
            ignored = bool(data.get("ignore_errors"))
            shown = outcome
            if outcome == "ok":
                r.ok += 1
                if res.get("changed"):
                    r.changed += 1
                    shown = "changed"
                    if r.status == "ok":
                        r.status = "changed"
            elif outcome == "failed" and not ignored:
                r.status = "failed"
                r.task = task
                r.message = self._item_errors.pop((host, task), None) or _message(res)
            elif outcome == "unreachable":
                r.status = "unreachable"
                r.task = task
                r.message = _message(res)
            if self._progress is not None:
                self._progress(TaskDone(host, task, shown))
            if r.status in ("failed", "unreachable"):
                self._report(r)
        return keep


def _message(res: Mapping[str, Any]) -> str:
    """The most useful one-line reason from a module result."""
    msg = str(res.get("msg") or "").strip()
    results = res.get("results")
    if isinstance(results, list) and msg in ("", "All items completed", "One or more items failed"):
        # A loop: the reason is in the first failed item.
        for item in results:
            if isinstance(item, Mapping) and item.get("failed"):
                return _message(item)
    stderr = str(res.get("stderr") or res.get("module_stderr") or "").strip()
    if stderr and (not msg or msg.startswith(("non-zero return code", "MODULE FAILURE"))):
        msg = f"{msg}: {stderr.splitlines()[-1]}" if msg else stderr.splitlines()[-1]
    if not msg:
        msg = "failed (no message)"
    first = msg.splitlines()[0] if msg.splitlines() else msg
    return first[:500]


def new_ident(label: str) -> str:
    """A sortable, unique run id: ``<UTC time>-<label>-<pid>``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    safe = "".join(c if c.isalnum() or c in "-_" else "_" for c in label)[:40]
    return f"{stamp}-{safe}-{os.getpid()}-{time.monotonic_ns() % 100000:05d}"


def run_playbook(
    settings: RunnerSettings,
    playbook: Path,
    inventory: Mapping[str, Any],
    hosts: Sequence[str],
    extravars: Mapping[str, Any] | None = None,
    progress: ProgressSink | None = None,
    label: str = "run",
    group_vars: Path | None = None,
    phase: Phase = "bootstrap",
    scope: str = "",
    stop: PlayStop | None = None,
) -> RunResult:
    """Run ``playbook`` on exactly ``hosts`` of ``inventory``; per-host results, never per-host raises.

    ``inventory`` is a document of ``inventory.build_inventory``; ``group_vars`` a directory of
    the site's group_vars files to apply beside it. ``progress`` gets a ``TaskDone`` per task and
    one ``HostDone`` per host (of ``phase`` and ``scope``), never terminal output. ``stop`` ends
    the play early (the module docstring); a stop asked for before the start runs nothing.
    """
    if not hosts:
        return RunResult(ident="", status="successful", rc=0, artifact_dir=settings.artifacts_dir)
    if stop is not None and stop.requested():
        return _not_started(settings, hosts, stop, progress, phase, scope)
    if not playbook.is_file():
        raise AnsibleError(f"{playbook}: playbook not found")
    durable.private_dir(settings.artifacts_dir.parent)
    durable.private_dir(settings.artifacts_dir)
    ident = new_ident(label)
    collector = _Collector(hosts, progress, phase, scope)
    started = time.monotonic()
    # The private data dir (env/, the run's inventory) is one per run and thrown away; what
    # matters for post-mortems goes to the artifact dir, which is kept.
    with tempfile.TemporaryDirectory(prefix="xceprov-ansible-") as pdd:
        run_inventory = write_inventory(Path(pdd) / "inventory" / INVENTORY_NAME, only_hosts(inventory, hosts))
        if group_vars is not None:
            (run_inventory.parent / "group_vars").symlink_to(group_vars, target_is_directory=True)
        canceller = _Canceller(stop, Path(pdd) / "stop")
        runner = _run(settings, playbook, run_inventory, pdd, ident, extravars, collector, canceller)
    result = RunResult(
        ident=ident,
        status=str(runner.status),
        rc=int(runner.rc if runner.rc is not None else -1),
        artifact_dir=settings.artifacts_dir / ident,
        hosts=collector.results,
        elapsed=time.monotonic() - started,
    )
    seal(result.artifact_dir)
    rotate_artifacts(settings.artifacts_dir, settings.keep_artifacts)
    if stop is not None and canceller.asked_at is not None and result.status != "successful":
        result.stopped = True
        _mark_stopped(result.hosts.values(), stop.reason)
    elif result.status == "timeout":
        for r in result.hosts.values():
            if r.status in ("ok", "changed", "skipped"):
                r.status, r.message = "failed", f"the run exceeded its timeout of {settings.timeout:.0f} s"
    elif result.rc != 0 and not any(r.status in ("failed", "unreachable") for r in result.hosts.values()):
        # ansible-playbook failed before any host failed: a syntax error, a missing role, ...
        stdout = _tail(result.artifact_dir / "stdout")
        raise AnsibleError(f"{playbook.name} failed (rc={result.rc}): {stdout} (artifacts: {result.artifact_dir})")
    collector.finish()
    return result


def _run(
    settings: RunnerSettings,
    playbook: Path,
    inventory: Path,
    pdd: str,
    ident: str,
    extravars: Mapping[str, Any] | None,
    collector: _Collector,
    canceller: _Canceller,
) -> Any:
    """One ansible-runner run, with the environment cut down before anything is written."""
    from ansible_runner.interface import init_runner  # ~0.3 s to load; most verbs never need it

    # The stop plugin is on the path of the toolkit's runs only (the benchmark's raw run has none).
    ours = {
        **ansible_env(settings),
        "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS_DIR),
        STOP_FILE_VAR: str(canceller.stop_file),
    }
    try:
        runner = init_runner(
            private_data_dir=pdd,
            artifact_dir=str(settings.artifacts_dir),
            ident=ident,
            playbook=str(playbook.resolve()),
            inventory=str(inventory),
            extravars=dict(extravars or {}),
            envvars=ours,
            forks=settings.forks,
            timeout=int(settings.timeout),
            quiet=True,
            event_handler=collector,
            settings={"suppress_ansible_output": True, "pexpect_timeout": _POLL_SECONDS},
            # Always a cancel callback: without one, ansible-runner installs its own SIGTERM and
            # SIGINT handlers in the main thread for good, and a daemon that ran one play no
            # longer stops on SIGTERM.
            cancel_callback=canceller,
        )
        # init_runner seeded the environment with a copy of ours; run() writes it to the
        # `command` artifact and hands it to ansible-playbook. Neither may see our credentials.
        runner.config.env = run_environment(runner.config.env, ours, os.environ)
        runner.run()
    except Exception as exc:  # ansible-runner raises bare exceptions for setup problems
        kill_all(canceller.entry)
        raise AnsibleError(f"ansible-runner could not run {playbook.name}: {exc}") from exc
    except BaseException:  # an interrupt of our own process: nothing of the play may outlive it
        kill_all(canceller.entry)
        raise
    if runner.status == "timeout":  # ansible-runner's kill reached only the main process's group
        kill_all(canceller.entry)
    return runner


def _mark_stopped(results: Iterable[HostResult], reason: str) -> None:
    """Every host the play had not failed yet is ``stopped``: not done, and no failure of its own."""
    for r in results:
        if r.status in ("ok", "changed", "skipped"):
            r.status, r.message = STOPPED, f"not finished: {reason}"


def _not_started(
    settings: RunnerSettings,
    hosts: Sequence[str],
    stop: PlayStop,
    progress: ProgressSink | None,
    phase: Phase,
    scope: str,
) -> RunResult:
    """The result of a play a stop kept from starting: every host ``stopped``."""
    collector = _Collector(hosts, progress, phase, scope)
    _mark_stopped(collector.results.values(), stop.reason)
    collector.finish()
    return RunResult("", "canceled", -1, settings.artifacts_dir, collector.results, stopped=True)


def _tail(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    errors = [ln for ln in lines if "ERROR" in ln]
    return (errors or lines or ["no output"])[-1][:500]
