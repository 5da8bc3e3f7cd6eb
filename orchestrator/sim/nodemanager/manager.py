"""The node manager's supervision: keep the configured roles' processes running, stop dropped ones.

Stdlib only (shipped in the artifact). The one role the simulated node manager runs is
``worker``: a child process (``<package> worker --config FILE``) that joins the controller.

- The configuration is re-read on SIGHUP and on a timer (when its modification time or size
  changed), so a decommission works either way: the bootstrap role rewrites the file with
  ``"roles": []`` and signals, and a missed signal is caught by the timer.
- A worker that exits while the role is configured is restarted with exponential backoff
  (reset after it ran for a while); a worker exiting with ``EXIT_REFUSED`` (the controller
  refused the join: decommissioned host) is retried at the longest backoff only.
- When the role is dropped, the worker gets SIGTERM (SIGKILL after a grace) and is not restarted.
- Other roles are recorded as "not supported by the simulated node manager" and not run
  (``provisioner`` and ``reverse-proxy`` exist in the real node manager).
- A state file (JSON: node manager pid, worker pid, restarts, roles, last exit) is written on
  every change, for tests and for ``testinfra`` checks; the pidfile holds the node manager's pid.
- ``--join-result FILE``: the worker records its join outcome there (``joinresult``), for the
  boot hook of a baked image; the node manager removes an earlier one when it starts.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from . import joinresult
from .codes import EXIT_CONFIG, EXIT_REFUSED
from .config import ConfigProblem, NodeConfig, load

log = logging.getLogger("xce-node-manager")


def package_root() -> tuple[str, str]:
    """(``sys.path`` entry that makes this package importable, the package's dotted name)."""
    package = __package__ or "xce_node_manager"
    here = Path(__file__).resolve().parent
    return str(here.parents[package.count(".")]), package


def default_worker_argv(config_path: Path) -> list[str]:
    """How the node manager starts the worker role: the same interpreter, this package."""
    _, package = package_root()
    return [sys.executable, "-m", package, "worker", "--config", str(config_path)]


@dataclass
class Restart:
    """Restart delays for a dying worker: 0.5 s doubling to 30 s; reset after 60 s of running."""

    initial: float = 0.5
    maximum: float = 30.0
    stable_after: float = 60.0
    attempt: int = 0

    def delay(self, ran_for: float, refused: bool) -> float:
        """Delay before restarting a worker that ran for ``ran_for`` seconds."""
        if ran_for >= self.stable_after:
            self.attempt = 0
        if refused:
            return self.maximum
        d = min(self.maximum, self.initial * float(2 ** min(self.attempt, 16)))
        self.attempt += 1
        return d


@dataclass
class NodeManager:
    """Supervises the worker role as configured in ``config_path``."""

    config_path: Path
    state_file: Path | None = None
    worker_argv: Callable[[Path], list[str]] = default_worker_argv
    join_result: Path | None = None
    stop_grace: float = 10.0
    clock: Callable[[], float] = time.monotonic
    restart: Restart = field(default_factory=Restart)
    config: NodeConfig | None = None
    worker: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    restarts: int = 0
    last_exit: int | None = None
    _stamp: tuple[float, int] | None = None

    # -- configuration -------------------------------------------------------------------------

    def reload(self, force: bool = False) -> bool:
        """Re-read the configuration when it changed (or ``force``); apply it. True if re-read."""
        try:
            st = self.config_path.stat()
            stamp: tuple[float, int] | None = (st.st_mtime, st.st_size)
        except OSError:
            stamp = None
        if not force and stamp == self._stamp and self.config is not None:
            return False
        self._stamp = stamp
        try:
            config = load(self.config_path)
        except ConfigProblem as exc:
            # Keep running what runs: a half-written file must not kill the worker.
            log.error("%s (keeping the previous configuration)", exc)
            return False
        for role in config.roles:
            if role != "worker":
                log.warning("role %r is not supported by the simulated node manager; not started", role)
        self.config = config
        self.apply()
        return True

    def wants_worker(self) -> bool:
        """Whether the configuration asks for the worker role."""
        return self.config is not None and "worker" in self.config.roles

    # -- supervision ---------------------------------------------------------------------------

    def apply(self) -> None:
        """Start the worker when wanted, not running and no restart is pending; stop it when unwanted."""
        if self.wants_worker():
            if self.worker is None and self.restart_at is None:
                self._start_worker()
        else:
            self.restart_at = None
            if self.worker is not None:
                log.info("worker role dropped: stopping the worker (pid %d)", self.worker.pid)
                self._stop_worker()
        self.write_state()

    def poll(self) -> None:
        """Reap a dead worker and schedule or perform its restart."""
        now = self.clock()
        if self.worker is not None:
            code = self.worker.poll()
            if code is not None:
                ran_for = now - self.started_at
                self.last_exit = code
                self.worker = None
                if self.wants_worker():
                    delay = self.restart.delay(ran_for, refused=code in (EXIT_REFUSED, EXIT_CONFIG))
                    log.warning("worker exited with status %d after %.1fs; restarting in %.1fs", code, ran_for, delay)
                    self.restart_at = now + delay
                self.write_state()
        if self.restart_at is not None and now >= self.restart_at:
            self.restart_at = None
            if self.wants_worker():
                self.restarts += 1
                self._start_worker()
                self.write_state()

    def _start_worker(self) -> None:
        argv = self.worker_argv(self.config_path)
        if self.join_result is not None:
            argv = [*argv, "--join-result", str(self.join_result)]
        env = dict(os.environ)
        root, _ = package_root()
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.worker = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
        self.started_at = self.clock()
        log.info("worker started (pid %d)", self.worker.pid)

    def _stop_worker(self) -> None:
        worker, self.worker = self.worker, None
        if worker is None:
            return
        if worker.poll() is None:
            worker.terminate()
            try:
                worker.wait(self.stop_grace)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        self.last_exit = worker.returncode

    def shutdown(self) -> None:
        """Stop the worker (node manager exiting)."""
        self.restart_at = None
        self._stop_worker()
        self.write_state()

    def write_state(self) -> None:
        """Write the state file atomically (when configured)."""
        if self.state_file is None:
            return
        state = {
            "pid": os.getpid(),
            "roles": list(self.config.roles) if self.config else [],
            "worker_pid": self.worker.pid if self.worker is not None else None,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "restart_pending": self.restart_at is not None,
        }
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, self.state_file)


def write_pidfile(path: Path) -> None:
    """Write our pid; refuse when another live node manager holds the pidfile."""
    try:
        other = int(path.read_text(encoding="utf-8").strip() or "0")
    except (OSError, ValueError):
        other = 0
    if other and other != os.getpid():
        try:
            os.kill(other, 0)
        except ProcessLookupError:
            pass
        except PermissionError:
            raise SystemExit(f"xce-node-manager: already running (pid {other}, {path})") from None
        else:
            raise SystemExit(f"xce-node-manager: already running (pid {other}, {path})")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{os.getpid()}\n", encoding="utf-8")
    os.replace(tmp, path)


def run(
    config_path: Path,
    *,
    pidfile: Path | None = None,
    state_file: Path | None = None,
    join_result: Path | None = None,
    reload_interval: float = 5.0,
    tick: float = 0.2,
) -> int:
    """The node manager's main loop (main thread: installs SIGHUP/SIGTERM/SIGINT handlers)."""
    if pidfile is not None:
        write_pidfile(pidfile)
    joinresult.clear(join_result)  # an earlier boot's outcome is not this one's
    manager = NodeManager(config_path, state_file=state_file, join_result=join_result)
    hup = threading.Event()
    stop = threading.Event()

    def on_hup(signum: int, frame: FrameType | None) -> None:
        hup.set()

    def on_term(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    try:
        manager.reload(force=True)
        if manager.config is None:
            log.error("no valid configuration at %s; waiting for one", config_path)
        next_reload = time.monotonic() + reload_interval
        while not stop.is_set():
            if hup.is_set():
                hup.clear()
                log.info("SIGHUP: re-reading %s", config_path)
                manager.reload(force=True)
            elif time.monotonic() >= next_reload:
                manager.reload()
            if time.monotonic() >= next_reload:
                next_reload = time.monotonic() + reload_interval
            manager.poll()
            stop.wait(tick)
    finally:
        manager.shutdown()
        if pidfile is not None:
            try:
                if pidfile.read_text(encoding="utf-8").strip() == str(os.getpid()):
                    pidfile.unlink()
            except OSError:
                pass
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``xce-node-manager [run] ...`` and ``xce-node-manager worker --config FILE``."""
    import argparse

    from .config import DEFAULT_PATH

    parser = argparse.ArgumentParser(prog="xce-node-manager", description="Simulated XCE node manager.")
    sub = parser.add_subparsers(dest="command")
    for name in ("run", "worker"):
        p = sub.add_parser(name)
        p.add_argument("--config", type=Path, default=DEFAULT_PATH)
        p.add_argument("--log-level", default="INFO")
        p.add_argument("--join-result", type=Path, help="where the worker records its join outcome (JSON)")
        if name == "run":
            p.add_argument("--pidfile", type=Path)
            p.add_argument("--state-file", type=Path)
            p.add_argument("--reload-interval", type=float, default=5.0)
    words = list(sys.argv[1:] if argv is None else argv)
    if not words or words[0].startswith("-"):
        words.insert(0, "run")  # the node manager itself is the default command
    args = parser.parse_args(words)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s {args.command}[%(process)d]: %(message)s",
    )
    if args.command == "worker":
        from .worker import run_worker

        return run_worker(args.config, args.join_result)
    return run(
        args.config,
        pidfile=args.pidfile,
        state_file=args.state_file,
        join_result=args.join_result,
        reload_interval=args.reload_interval,
    )
