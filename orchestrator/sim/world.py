"""The simulated world's lifecycle: ``xceprov sim up``, ``down`` and ``status``.

Components, each a background process with a pid file ``<sim_state_dir>/run/<name>.pid`` and a
log ``<sim_state_dir>/log/<name>.log``:

- ``host-manager`` (``python -m orchestrator.sim.hosts serve``): one simulated host per running
  instance of the cloud store ``<sim_state_dir>/cloud.sqlite``. Needs root; without root,
  ``up`` reports it unavailable (and why) and starts the rest.
- ``controller`` (``python -m orchestrator.sim.controller serve``), when that module is
  installed: listens on ``127.0.0.1:<port>`` and, with the lab up, on ``<gateway>:<port>``
  (``10.213.0.1:7441`` by default) so that node managers inside hosts reach it over the lab.

``up`` issues what the orchestrator needs to talk to the controller (``orchestrator.sim.pki``:
the cluster CA, a provisioner client certificate and key, the worker join key; keys 0600 in
0700 directories) before it starts the controller. ``up --only controller`` (or
``--only host-manager``) starts one component through the same path; there is no other way to
start one, so ``status`` and ``down`` always see what runs.

``up`` binds the world's cloud (``cloud.sqlite``) to its lab: new instances get their addresses
inside the lab's subnet. ``up`` is idempotent: it claims the lab (as root; refused when another world's state directory
holds it) and creates it before anything listens on the gateway,
starts what is not running (a pid file whose process is gone or is another program counts as
not running) and waits until each component is ready. ``down`` stops the controller, then the
host manager (SIGTERM: it tears its hosts down; SIGKILL after a timeout), then sweeps whatever
is left of the hosts and removes the lab: afterwards no process, namespace, mount or veth of
the world remains. The lab settings ``up`` used are kept in ``run/world.json`` for ``down`` and
``status``.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import durable
from orchestrator.errors import FinalError, UsageError
from orchestrator.sim import pki
from orchestrator.sim.cloud.service import store_path
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.sim.hosts import lab as labnet
from orchestrator.sim.hosts.host import port_open
from orchestrator.sim.hosts.keys import ensure_toolkit_key, known_hosts_path, remove_control_dir, toolkit_key
from orchestrator.sim.hosts.manager import read_status, sweep

DEFAULT_CONTROLLER_PORT = 7441
HOST_MANAGER = "host-manager"
CONTROLLER = "controller"
COMPONENTS = (HOST_MANAGER, CONTROLLER)
_READY_TIMEOUT = 30.0
_STOP_TIMEOUT = 30.0

# Started through a short-lived spawner so that the daemon is nobody's child here (no zombie,
# no "still running" warning) and runs in its own session, away from the terminal's signals.
_SPAWN = (
    "import subprocess, sys\n"
    "log = open(sys.argv[1], 'ab')\n"
    "p = subprocess.Popen(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=log, stderr=log,"
    " start_new_session=True)\n"
    "print(p.pid)\n"
)


class WorldError(FinalError):
    """A component of the simulated world could not be started or stopped; one line."""


@dataclass(frozen=True)
class WorldSettings:
    """Where the world lives and which lab and controller port it uses."""

    state_dir: Path
    lab: labnet.LabConfig = field(default_factory=labnet.LabConfig)
    controller_port: int = DEFAULT_CONTROLLER_PORT

    @property
    def run_dir(self) -> Path:
        """Pid files and ``world.json``."""
        return self.state_dir / "run"

    @property
    def log_dir(self) -> Path:
        """Component logs."""
        return self.state_dir / "log"


def settings_for(
    state_dir: Path,
    *,
    lab_name: str | None = None,
    lab_subnet: str | None = None,
    controller_port: int | None = None,
    configured_addresses: Sequence[str] = (),
) -> WorldSettings:
    """Settings from explicit values, else those ``up`` recorded in ``run/world.json``, else the
    configuration's (the controller port of ``configured_addresses``, see :func:`configured_port`),
    else defaults."""
    state_dir = state_dir.resolve()
    saved: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        saved = json.loads((state_dir / "run" / "world.json").read_text())
    saved_lab = saved.get("lab", {}) if isinstance(saved.get("lab"), dict) else {}
    lab = labnet.LabConfig.parse(
        lab_name or str(saved_lab.get("name", labnet.DEFAULT_LAB_NAME)),
        lab_subnet or str(saved_lab.get("subnet", labnet.LAB_SPACE)),
    )
    port = controller_port or int(
        saved.get("controller_port") or configured_port(configured_addresses) or DEFAULT_CONTROLLER_PORT
    )
    if not 1 <= port <= 65535:
        raise UsageError(f"controller port {port} is not a TCP port")
    return WorldSettings(state_dir=state_dir, lab=lab, controller_port=port)


def configured_port(addresses: Sequence[str]) -> int | None:
    """The port of the first loopback address of ``controller.addresses``: where the orchestrator
    of this configuration looks for the controller, so where the simulated one listens. None when
    no address is on this machine's loopback (the configuration names a controller elsewhere)."""
    for address in addresses:
        host, sep, port = address.rpartition(":")
        host = host.strip("[]")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            continue
        if host == "localhost" or _loopback(host):
            return int(port)
    return None


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def lab_unreachable(settings: WorldSettings, worker_addresses: Sequence[str]) -> str | None:
    """A warning when the configuration's ``controller.worker_addresses`` do not name the lab
    gateway's controller address, so node managers inside this world's hosts would not reach it."""
    expected = f"{settings.lab.gateway}:{settings.controller_port}"
    if not worker_addresses or expected in worker_addresses:
        return None
    return (
        f"controller.worker_addresses {', '.join(worker_addresses)} does not name {expected}, "
        f"where this world's controller listens for its hosts (lab {settings.lab.name})"
    )


@dataclass
class ComponentStatus:
    """One component as ``xceprov sim status`` shows it."""

    name: str
    state: str  # running | stopped | unavailable
    pid: int | None = None
    addresses: list[str] = field(default_factory=list)
    detail: str = ""
    log: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "name": self.name,
            "state": self.state,
            "pid": self.pid,
            "addresses": self.addresses,
            "detail": self.detail,
            "log": self.log,
        }


@dataclass
class WorldStatus:
    """The whole world: components, the lab and the hosts."""

    state_dir: Path
    lab: labnet.LabConfig
    lab_up: bool
    components: list[ComponentStatus]
    hosts: list[dict[str, Any]]
    known_hosts: Path

    def to_json(self) -> dict[str, Any]:
        """The shape of ``xceprov sim status --json``."""
        return {
            "state_dir": str(self.state_dir),
            "lab": dict(self.lab.to_json(), up=self.lab_up),
            "components": [c.to_json() for c in self.components],
            "hosts": self.hosts,
            "known_hosts": str(self.known_hosts),
            "ssh_key": str(toolkit_key(self.state_dir)),
            "controller_tls": {
                "ca": str(self.state_dir / "tls" / "ca.pem"),
                "client_cert": str(self.state_dir / "client" / "provisioner.pem"),
                "client_key": str(self.state_dir / "client" / "provisioner.key"),
                "join_key": str(self.state_dir / "client" / "join.key"),
            },
        }

    def component(self, name: str) -> ComponentStatus:
        """The component called ``name``."""
        return next(c for c in self.components if c.name == name)


# ------------------------------------------------------------------------------ processes


def _is_root() -> bool:
    return os.geteuid() == 0


def _controller_available() -> bool:
    try:
        return importlib.util.find_spec("orchestrator.sim.controller.__main__") is not None
    except ModuleNotFoundError:
        return False


def _pid_file(settings: WorldSettings, name: str) -> Path:
    return settings.run_dir / f"{name}.pid"


def _alive(pid: int, marker: str) -> bool:
    """Whether ``pid`` runs (not a zombie) and its command line contains ``marker``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X") and marker in cmdline


def _running_pid(settings: WorldSettings, name: str, marker: str) -> int | None:
    try:
        pid = int(_pid_file(settings, name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if _alive(pid, marker) else None


def _spawn(settings: WorldSettings, name: str, argv: list[str]) -> int:
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    log = settings.log_dir / f"{name}.log"
    env = dict(os.environ)
    # Run the same package the caller runs, installed or from a checkout.
    package_root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", _SPAWN, str(log), *argv],
        capture_output=True,
        text=True,
        cwd=settings.state_dir,
        env=env,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout.strip().isdigit():
        raise WorldError(f"cannot start {name}: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    pid = int(proc.stdout.strip())
    tmp = _pid_file(settings, name).with_suffix(".tmp")
    tmp.write_text(f"{pid}\n")
    durable.replace(tmp, _pid_file(settings, name))
    return pid


def _tail(path: Path, lines: int = 1) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def _stop(settings: WorldSettings, name: str, marker: str, timeout: float) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; returns whether it had been running."""
    pid = _running_pid(settings, name, marker)
    if pid is None:
        _pid_file(settings, name).unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(pid, marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        kill_deadline = time.monotonic() + 5
        while _alive(pid, marker) and time.monotonic() < kill_deadline:
            time.sleep(0.05)
    _pid_file(settings, name).unlink(missing_ok=True)
    return True


# ------------------------------------------------------------------------------ components


def _hm_marker(settings: WorldSettings) -> str:
    return f"orchestrator.sim.hosts serve --state-dir {settings.state_dir}"


def _hm_argv(settings: WorldSettings) -> list[str]:
    lab = settings.lab
    return [
        sys.executable, "-m", "orchestrator.sim.hosts", "serve", "--state-dir", str(settings.state_dir),
        "--lab-name", lab.name, "--lab-subnet", str(lab.subnet),
    ]  # fmt: skip


def _ctl_marker(settings: WorldSettings) -> str:
    return f"orchestrator.sim.controller serve --state-dir {settings.state_dir}"


def _ctl_listen(settings: WorldSettings, with_lab: bool) -> list[str]:
    out = [f"127.0.0.1:{settings.controller_port}"]
    if with_lab:
        out.append(f"{settings.lab.gateway}:{settings.controller_port}")
    return out


def _ctl_argv(settings: WorldSettings, listen: list[str]) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "orchestrator.sim.controller",
        "serve",
        "--state-dir",
        str(settings.state_dir),
    ]
    for addr in listen:
        argv += ["--listen", addr]
    return argv


def _wait(what: str, ready: Any, pid: int, marker: str, log: Path) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT
    while time.monotonic() < deadline:
        if ready():
            return
        if not _alive(pid, marker):
            raise WorldError(f"{what} exited during start: {_tail(log) or 'no output'} (log: {log})")
        time.sleep(0.05)
    raise WorldError(f"{what} not ready after {_READY_TIMEOUT:g}s (log: {log})")


def _start_host_manager(settings: WorldSettings) -> None:
    marker = _hm_marker(settings)
    if _running_pid(settings, HOST_MANAGER, marker) is not None:
        return
    pid = _spawn(settings, HOST_MANAGER, _hm_argv(settings))

    def ready() -> bool:
        status = read_status(settings.state_dir)
        return bool(status and status.get("manager_pid") == pid and status.get("running"))

    _wait("host manager", ready, pid, marker, settings.log_dir / f"{HOST_MANAGER}.log")


def _start_controller(settings: WorldSettings, with_lab: bool) -> None:
    marker = _ctl_marker(settings)
    if _running_pid(settings, CONTROLLER, marker) is not None:
        return
    if port_open("127.0.0.1", settings.controller_port, timeout=0.3):
        raise WorldError(
            f"127.0.0.1:{settings.controller_port} is already in use by another program; "
            "stop it or choose another controller port"
        )
    pid = _spawn(settings, CONTROLLER, _ctl_argv(settings, _ctl_listen(settings, with_lab)))
    _wait(
        "controller",
        lambda: port_open("127.0.0.1", settings.controller_port, timeout=0.3),
        pid,
        marker,
        settings.log_dir / f"{CONTROLLER}.log",
    )


def _save(settings: WorldSettings) -> None:
    settings.run_dir.mkdir(parents=True, exist_ok=True)
    data = {"lab": settings.lab.to_json(), "controller_port": settings.controller_port}
    (settings.run_dir / "world.json").write_text(json.dumps(data, indent=1) + "\n")


# ------------------------------------------------------------------------------ the verbs


@contextlib.contextmanager
def _world_locked(settings: WorldSettings) -> Iterator[None]:
    """``up`` and ``down`` of one world never run at the same time (two ``up`` would both spawn)."""
    try:
        settings.run_dir.mkdir(parents=True, exist_ok=True)
        lock = open(settings.run_dir / "world.lock", "a")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise WorldError(f"cannot lock {settings.run_dir / 'world.lock'}: {exc.strerror or exc}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def up(settings: WorldSettings, only: str | None = None) -> WorldStatus:
    """Start every component (or ``only`` that one) that is not running (idempotent); returns the
    status afterwards."""
    if only is not None and only not in COMPONENTS:
        raise UsageError(f"--only {only!r}: expected one of {', '.join(COMPONENTS)}")
    with _world_locked(settings):
        return _up(settings, only)


def _refuse_other_settings(settings: WorldSettings) -> None:
    """A running world keeps the lab and port it was started with: ``up`` with others would
    record and bind them while its processes still use the old ones."""
    recorded = settings_for(settings.state_dir)
    if not (settings.run_dir / "world.json").is_file() or (recorded.lab, recorded.controller_port) == (
        settings.lab,
        settings.controller_port,
    ):
        return
    markers = ((HOST_MANAGER, _hm_marker(settings)), (CONTROLLER, _ctl_marker(settings)))
    if any(_running_pid(settings, name, marker) is not None for name, marker in markers):
        raise UsageError(
            f"the simulated world in {settings.state_dir} runs on lab {recorded.lab.name} "
            f"({recorded.lab.subnet}) with controller port {recorded.controller_port}; "
            "run 'xceprov sim down' before starting it on another lab or port"
        )


def _up(settings: WorldSettings, only: str | None) -> WorldStatus:
    _refuse_other_settings(settings)
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    _save(settings)
    _bind_cloud(settings)
    ensure_toolkit_key(settings.state_dir)
    # The orchestrator's client certificate and join key exist before the controller that checks them.
    pki.ensure_client_files(settings.state_dir)
    root = _is_root()
    if root and only in (None, HOST_MANAGER):
        # Before anything listens on the gateway address, the address must exist.
        labnet.claim_lab(settings.lab, str(settings.state_dir))
        _start_host_manager(settings)
    if _controller_available() and only in (None, CONTROLLER):
        with_lab = root and labnet.owns_lab(settings.lab, str(settings.state_dir)) and labnet.lab_exists(settings.lab)
        _start_controller(settings, with_lab=with_lab)
    return status(settings)


def _bind_cloud(settings: WorldSettings) -> None:
    """The world's cloud hands out addresses inside the world's lab, so that a second world on a
    lab of its own gets hosts there (and not in the first world's subnet)."""
    store = CloudStore(store_path(settings.state_dir))
    try:
        store.set_network(settings.lab.subnet)
    finally:
        store.close()


def down(settings: WorldSettings) -> WorldStatus:
    """Stop everything and remove the lab; nothing of the world keeps running (idempotent)."""
    with _world_locked(settings):
        return _down(settings)


def _down(settings: WorldSettings) -> WorldStatus:
    _stop(settings, CONTROLLER, _ctl_marker(settings), _STOP_TIMEOUT)
    running_hm = _running_pid(settings, HOST_MANAGER, _hm_marker(settings)) is not None
    if running_hm and not _is_root():
        raise WorldError("the host manager runs as root; run 'xceprov sim down' as root")
    _stop(settings, HOST_MANAGER, _hm_marker(settings), _STOP_TIMEOUT)
    if _is_root() and labnet.owns_lab(settings.lab, str(settings.state_dir)):
        sweep(settings.state_dir, settings.lab)
        labnet.release_lab(settings.lab, str(settings.state_dir))
    remove_control_dir(settings.state_dir)
    (settings.run_dir / "world.json").unlink(missing_ok=True)
    return status(settings)


def status(settings: WorldSettings) -> WorldStatus:
    """What runs now; never changes anything."""
    root = _is_root()
    components: list[ComponentStatus] = []
    lab_up = root and labnet.lab_exists(settings.lab)

    hm_pid = _running_pid(settings, HOST_MANAGER, _hm_marker(settings))
    hm_log = str(settings.log_dir / f"{HOST_MANAGER}.log")
    if hm_pid is not None:
        components.append(
            ComponentStatus(
                HOST_MANAGER,
                "running",
                hm_pid,
                [f"{settings.lab.gateway}/{settings.lab.subnet.prefixlen}"],
                f"lab {settings.lab.name}",
                hm_log,
            )
        )
    elif not root:
        components.append(
            ComponentStatus(
                HOST_MANAGER,
                "unavailable",
                detail="simulated hosts need root (network namespaces and mounts); run as root",
                log=hm_log,
            )
        )
    else:
        components.append(ComponentStatus(HOST_MANAGER, "stopped", log=hm_log))

    ctl_log = str(settings.log_dir / f"{CONTROLLER}.log")
    ctl_pid = _running_pid(settings, CONTROLLER, _ctl_marker(settings))
    if ctl_pid is not None:
        components.append(ComponentStatus(CONTROLLER, "running", ctl_pid, _ctl_listen(settings, lab_up), log=ctl_log))
    elif not _controller_available():
        components.append(
            ComponentStatus(
                CONTROLLER, "unavailable", detail="orchestrator.sim.controller is not installed", log=ctl_log
            )
        )
    else:
        components.append(ComponentStatus(CONTROLLER, "stopped", log=ctl_log))

    hosts: list[dict[str, Any]] = []
    if hm_pid is not None:
        published = read_status(settings.state_dir) or {}
        if published.get("manager_pid") == hm_pid:
            hosts = list(published.get("hosts", []))
    return WorldStatus(
        state_dir=settings.state_dir,
        lab=settings.lab,
        lab_up=lab_up,
        components=components,
        hosts=hosts,
        known_hosts=known_hosts_path(settings.state_dir),
    )
