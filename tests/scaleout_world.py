"""Several ``xceprov daemon`` processes over one simulated world and one throw-away PostgreSQL.

The setup of docs/scale-out.md ("two daemons on one machine"), for the scale-out tests: one
world (``sim_world_helpers.sim_world``: the simulated controller and cloud, no hosts), one
private PostgreSQL (``pg_server``), four providers of the simulated cloud (``p1`` .. ``p4``),
and per daemon a site directory of its own (``<site>/<name>/``: its configuration, its state
directory, its log) with ``terraform.backend: pg``. Every daemon joins with the same client
certificate; the controller tells them apart by their process instance (docs/protocol.md §5).

Use::

    with scaleout_world(tmp_path) as w:
        a, b = w.start("a"), w.start("b")
        w.wait_split(a, b)
        w.status("a")                       # xceprov status with a's configuration

Commands run with ``PG_CONN_STR`` in their environment only (never in a file). ``Member.kill9``
is a crash (``kill -9`` of the daemon's whole process tree, the lease keeper included);
``Member.terminate`` a clean stop. Everything is stopped and removed when the block ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pg_server import PgServer, pg_server
from sim_world_helpers import SimWorld, process_tree, sim_world, wait_until

PROVIDERS = ("p1", "p2", "p3", "p4")
STOP_TIMEOUT = 30.0


def scaleout_config(world: SimWorld, name: str, providers: tuple[str, ...] = PROVIDERS) -> dict[str, Any]:
    """The world's configuration for daemon ``name``: its own state directory, the ``pg`` backend,
    ``providers`` as regions of the simulated cloud, short intervals for tests."""
    cfg: dict[str, Any] = yaml.safe_load((world.site / "xceprov.yaml").read_text())
    sim = cfg["providers"].pop("sim")
    cfg["providers"] = {p: dict(sim) for p in providers}
    cpu = cfg["templates"]["cpu"]
    cpu["providers"] = {p: dict(cpu["providers"]["sim"]) for p in providers}
    cfg["templates"] = {"cpu": cpu}
    cfg["state_dir"] = str(world.site / name / "state")
    cfg["terraform"] = {"backend": "pg"}
    cfg["daemon"] = {"reconcile_interval": "2s", "stop_timeout": f"{STOP_TIMEOUT:g}s"}
    # No hosts in this world: a failed bootstrap is tried again only after 10 minutes.
    cfg["ansible"] = {"timeout": "4s"}
    cfg["policy"] = {"cooldown": "1s", "retry": {"base": "600s", "max": "600s"}}
    return cfg


@dataclass
class Member:
    """One daemon of the scale-out world: its configuration, process and log."""

    name: str
    site: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    _log: Any = None

    @property
    def config(self) -> Path:
        return self.site / "xceprov.yaml"

    @property
    def state(self) -> Path:
        return self.site / "state"

    @property
    def log_path(self) -> Path:
        return self.site / "daemon.log"

    def start(self, *options: str) -> Member:
        """Start ``xceprov [options] daemon`` with this member's configuration (``-vv``: debug log)."""
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed when the process is waited for
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.cli", *options, "daemon"],
            cwd=self.site,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def status(self) -> dict[str, Any]:
        """The daemon's status file (empty before its first pass)."""
        path = self.state / "daemon" / "status.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def held(self) -> dict[str, str]:
        """Provider -> epoch of the leases its status file says it holds."""
        return {r["provider"]: r["epoch"] for r in self.status().get("leases", []) if r.get("held")}

    def instance(self) -> str:
        """Its process instance (the lease holder and member row), from its status file."""
        return str((self.status().get("store") or {}).get("instance", ""))

    def xceprov(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """One command with this member's configuration and the database's connection string."""
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "--config", str(self.config), *args],
            cwd=self.site,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def _waited(self, timeout: float) -> int:
        assert self.proc is not None
        code = self.proc.wait(timeout)
        if self._log is not None:
            self._log.close()
        return code

    def terminate(self) -> int:
        """A clean stop (SIGTERM): its exit status."""
        os.kill(self.pid, signal.SIGTERM)
        return self._waited(STOP_TIMEOUT + 30)

    def kill9(self) -> None:
        """A crash: ``kill -9`` of the daemon and every process below it (lease keeper, Terraform)."""
        for pid in process_tree(self.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._waited(30)

    def stop(self) -> None:
        """Whatever state it is in: nothing of it outlives the test."""
        if not self.alive():
            if self.proc is not None:
                self._waited(10)
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        try:
            self._waited(STOP_TIMEOUT + 10)
        except subprocess.TimeoutExpired:
            os.killpg(self.pid, signal.SIGKILL)
            self._waited(10)


@dataclass
class Scaleout:
    """The world, the database and the daemons started in it."""

    world: SimWorld
    pg: PgServer
    providers: tuple[str, ...] = PROVIDERS
    members: dict[str, Member] = field(default_factory=dict)

    def member(self, name: str, providers: tuple[str, ...] | None = None) -> Member:
        """Daemon ``name``'s site (configured for ``providers``, default all), not started."""
        site = self.world.site / name
        site.mkdir(parents=True, exist_ok=True)
        cfg = scaleout_config(self.world, name, providers or self.providers)
        (site / "xceprov.yaml").write_text(yaml.safe_dump(cfg))
        env = {**os.environ, "XCEPROV_CONFIG": str(site / "xceprov.yaml"), "PG_CONN_STR": self.pg.conn_str}
        self.members[name] = Member(name, site, env)
        return self.members[name]

    def start(self, name: str, providers: tuple[str, ...] | None = None) -> Member:
        """Configure and start daemon ``name``."""
        return self.member(name, providers).start()

    def wait_for(self, what: str, check: Callable[[], bool], timeout: float = 90.0) -> None:
        """Poll ``check`` while every started daemon stays up; on a timeout, their logs' ends."""

        def ready() -> bool:
            for m in self.members.values():
                assert m.proc is None or m.alive() or m.proc.returncode in (0, -signal.SIGKILL), (
                    f"daemon {m.name} exited ({m.proc.returncode}):\n{m.log()[-4000:]}"
                )
            return check()

        try:
            wait_until(what, ready, timeout=timeout, every=0.3)
        except AssertionError as exc:
            logs = "\n".join(f"--- {m.name} ---\n{m.log()[-3000:]}" for m in self.members.values())
            raise AssertionError(f"{exc}\n{logs}") from None

    def split(self, *members: Member) -> dict[str, set[str]]:
        """Which providers each of ``members`` holds by its status file."""
        return {m.name: set(m.held()) for m in members}

    def wait_split(self, *members: Member, timeout: float = 90.0) -> dict[str, set[str]]:
        """Until ``members`` hold every provider between them, each its fair share (⌊P/L⌋ or ⌈P/L⌉)
        and no provider twice; the split."""
        low, high = divmod(len(self.providers), len(members))

        def fair() -> bool:
            got = self.split(*members)
            held = [p for ps in got.values() for p in ps]
            sizes = {len(ps) for ps in got.values()}
            return sorted(held) == sorted(self.providers) and sizes <= {low, low + (1 if high else 0)}

        self.wait_for(f"the {len(self.providers)} providers split between {len(members)} daemons", fair, timeout)
        return self.split(*members)


@contextlib.contextmanager
def scaleout_world(tmp: Path, providers: tuple[str, ...] = PROVIDERS) -> Iterator[Scaleout]:
    """A world, a database, and the daemons the block starts (all stopped at the end)."""
    with pg_server() as pg, sim_world(tmp / "site", f"so-{secrets.token_hex(3)}") as world:
        scale = Scaleout(world, pg, providers)
        try:
            yield scale
        finally:
            for m in scale.members.values():
                m.stop()
