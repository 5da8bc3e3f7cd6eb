"""The host manager: one long-running process that keeps one simulated host per running instance.

``python -m orchestrator.sim.hosts serve --state-dir DIR`` (started by ``xceprov sim up``):

- on start: claims the lab (creating it if missing; refused if another world's state directory
  holds it, since two worlds on one lab would sweep each other's hosts), then *sweeps*: kills and
  removes what a crashed previous run left (host namespaces of this lab, veths on its bridge,
  boot processes recorded in ``hosts/<id>/host.json``), and removes the directories of instances
  that no longer exist;
- every ``poll_interval`` (0.5 s): reads the cloud store and reconciles: a host for every
  ``running`` instance whose address lies in the lab, teardown for stopped ones (their
  directory, the "disk", is kept) and terminated ones (directory removed). A pass that cannot
  read the store changes nothing. Teardowns run before creations, so an address given back by a
  terminated instance is free when a new instance gets it. A host whose boot fails is torn down
  and retried after ``retry_after`` seconds;
- writes ``hosts/known_hosts`` (one line per live host) and ``hosts/hosts.json`` (the status
  ``xceprov sim hosts list`` shows) after every change;
- on SIGTERM or SIGINT: tears every host down and exits 0 (the lab stays for the rest of the
  world unless ``--remove-lab``).

Per instance, the tag ``xcesim:ssh_delay`` (seconds, or ``5s``) delays its sshd, to simulate a
host whose SSH comes up late; ``--ssh-delay`` sets a default for all. Hosts are started and torn
down several at a time (8 threads): each is mostly waiting for ``ip``, ``ssh-keygen`` and a fork.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol, TypeVar

from orchestrator import durable
from orchestrator.errors import FinalError, XceprovError
from orchestrator.model.durations import parse_duration
from orchestrator.sim.hosts import lab as labnet
from orchestrator.sim.hosts.host import HostSpec, SimHost, hostname_for, sweep_host_dir
from orchestrator.sim.hosts.keys import (
    ensure_toolkit_key,
    known_hosts_path,
    public_key,
    remove_control_dir,
    write_known_hosts,
)

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_R = TypeVar("_R")

SSH_DELAY_TAG = "xcesim:ssh_delay"
STATUS_FILE = "hosts.json"


@dataclass(frozen=True)
class InstanceView:
    """What the host manager needs of an instance."""

    id: str
    name: str
    address: str
    state: str
    user_data: str = ""
    tags: dict[str, str] = field(default_factory=dict)


class HostManagerRunning(XceprovError):
    """A host manager already runs for this state directory."""

    exit_code = 75


class HostsUnavailable(FinalError):
    """This machine cannot run simulated hosts; the message says what is missing."""

    exit_code = 77


# What a host needs on the machine, and the Debian package that provides it.
_NEEDED = {"ip": "iproute2", "unshare": "util-linux", "sshd": "openssh-server", "ssh-keygen": "openssh-client"}


def preflight() -> None:
    """Raise ``HostsUnavailable`` unless root and the programs the hosts need are installed."""
    if os.geteuid() != 0:
        raise HostsUnavailable("simulated hosts need root (network namespaces and mounts)")
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = sorted({pkg for prog, pkg in _NEEDED.items() if shutil.which(prog, path=path) is None})
    if missing:
        raise HostsUnavailable(
            f"simulated hosts need the Debian packages {', '.join(missing)} (scripts/setup-env.sh installs them)"
        )


class InstanceSource(Protocol):
    """Where instances come from; ``None`` means "could not read this time" (do nothing destructive)."""

    def instances(self) -> list[InstanceView] | None:
        """Every instance that is not terminated (running and stopped)."""


class CloudStoreSource:
    """Instances of the simulated cloud store at ``path`` (``<sim_state_dir>/cloud.sqlite``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._store: Any = None
        self._warned = False

    def instances(self) -> list[InstanceView] | None:
        """Non-terminated instances; an absent store file is an empty cloud."""
        if self._store is None:
            if not self.path.exists():
                return []
            try:
                from orchestrator.sim.cloud.store import CloudStore
            except ImportError as exc:
                if not self._warned:
                    log.warning("cloud store module unavailable (%s); no hosts will be made", exc)
                    self._warned = True
                return None
            self._store = CloudStore(self.path)
        try:
            found = self._store.list_instances()
            # What each host boots with: a first-boot host's copy holds its join token.
            boot = self._store.boot_copies()
        except Exception as exc:  # phase boundary: an unreadable store skips the pass
            log.warning("cannot read the cloud store %s: %s", self.path, exc)
            return None
        return [
            InstanceView(
                id=str(i.id),
                name=str(i.name),
                address=str(i.address),
                state=str(i.state),
                user_data=boot.get(str(i.id), str(i.user_data or "")),
                tags=dict(i.tags),
            )
            for i in found
        ]


@dataclass
class _Failed:
    at: float
    error: str
    attempts: int


class HostManager:
    """Keeps the hosts of ``lab`` in line with ``source``; see the module docstring."""

    def __init__(
        self,
        state_dir: Path,
        lab: labnet.LabConfig,
        source: InstanceSource,
        *,
        ssh_delay: float = 0.0,
        retry_after: float = 5.0,
        workers: int = 8,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.state_dir = state_dir.resolve()
        self.hosts_dir = state_dir / "hosts"
        self.lab = lab
        self.source = source
        self.ssh_delay = ssh_delay
        self.retry_after = retry_after
        self.workers = max(1, workers)
        self.clock = clock
        self.hosts: dict[str, SimHost] = {}
        self.failed: dict[str, _Failed] = {}
        self.skipped: dict[str, str] = {}
        self._authorized = ""
        self._last_status: Any = None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Make the lab and the toolkit key, sweep leftovers of a previous run, publish the status."""
        preflight()
        self.hosts_dir.mkdir(parents=True, exist_ok=True)
        self._authorized = public_key(ensure_toolkit_key(self.state_dir))
        labnet.claim_lab(self.lab, str(self.state_dir))
        sweep(self.state_dir, self.lab)
        self._publish(force=True)

    def reconcile_once(self) -> bool:
        """One pass; returns whether anything changed. Never raises for one host's trouble."""
        found = self.source.instances()
        if found is None:
            self._poll_states()
            return False
        changed = False
        live = {i.id: i for i in found}
        want = {i.id: i for i in found if i.state == "running"}
        # Teardowns first: a terminated instance's address may already belong to a new one.
        going = [
            (iid, iid not in live)
            for iid, host in self.hosts.items()
            if (inst := want.get(iid)) is None
            or inst.address != host.spec.address
            or hostname_for(inst.name) != host.spec.name
        ]
        self._teardown_many(going)
        changed |= bool(going)
        for iid in [i for i in self.failed if i not in want]:
            del self.failed[iid]
        self.skipped = {}
        coming: list[InstanceView] = []
        for iid, inst in want.items():
            if iid in self.hosts:
                continue
            if not self.lab.holds(inst.address):
                self.skipped[iid] = f"address {inst.address} is outside the lab subnet {self.lab.subnet}"
                continue
            clash = next((h for h in self.hosts.values() if h.spec.address == inst.address), None)
            if clash is not None:
                self.skipped[iid] = f"address {inst.address} is still held by {clash.spec.instance_id}"
                continue
            failed = self.failed.get(iid)
            if failed is not None and self.clock() - failed.at < self.retry_after * failed.attempts:
                continue
            coming.append(inst)
        self._create_many(coming)
        changed |= bool(coming)
        # Directories of terminated instances whose host was never up in this run.
        for d in self.hosts_dir.iterdir() if self.hosts_dir.is_dir() else []:
            if d.is_dir() and d.name not in live and d.name not in self.hosts and (d / "boot.json").exists():
                shutil.rmtree(d, ignore_errors=True)
        changed |= self._poll_states()
        self._publish(force=changed)
        return changed

    def _host_for(self, inst: InstanceView) -> SimHost:
        delay = self.ssh_delay
        if SSH_DELAY_TAG in inst.tags:
            try:
                delay = parse_duration(inst.tags[SSH_DELAY_TAG])
            except ValueError as exc:
                log.warning("instance %s: tag %s: %s", inst.id, SSH_DELAY_TAG, exc)
        spec = HostSpec(inst.id, hostname_for(inst.name), inst.address, inst.user_data, delay)
        return SimHost(spec, self.lab, self.hosts_dir, self._authorized, self.state_dir)

    def _create_many(self, instances: list[InstanceView]) -> None:
        """Start hosts, several at a time (each is mostly waiting for ip, ssh-keygen and a fork)."""
        hosts = [self._host_for(inst) for inst in instances]

        def start(host: SimHost) -> tuple[SimHost, float, Exception | None]:
            started = time.monotonic()
            try:
                host.start()
            except Exception as exc:  # phase boundary: one host's failure must not stop the others
                return host, time.monotonic() - started, exc
            return host, time.monotonic() - started, None

        for host, took, exc in self._map(start, hosts):
            spec = host.spec
            if exc is not None:
                log.error("host %s (%s): start failed: %s", spec.instance_id, spec.name, exc)
                self._forget_failed(host, str(exc))
                continue
            self.hosts[spec.instance_id] = host
            log.info("host %s (%s, %s) started in %.3fs", spec.instance_id, spec.name, spec.address, took)

    def _map(self, fn: Callable[[_T], _R], items: list[_T]) -> list[_R]:
        if len(items) <= 1:
            return [fn(i) for i in items]
        with ThreadPoolExecutor(max_workers=min(self.workers, len(items)), thread_name_prefix="simhost") as pool:
            return list(pool.map(fn, items))

    def _forget_failed(self, host: SimHost, error: str) -> None:
        iid = host.spec.instance_id
        try:
            host.stop(remove_disk=False)
        except Exception as exc:  # keep the first error; the sweep of the next start retries
            log.error("host %s: teardown after failure: %s", iid, exc)
        prev = self.failed.get(iid)
        self.failed[iid] = _Failed(self.clock(), error, (prev.attempts + 1) if prev else 1)
        self.hosts.pop(iid, None)

    def _teardown_many(self, going: list[tuple[str, bool]]) -> None:
        """Tear hosts down (``(instance id, remove its directory)``), several at a time."""
        hosts = [(self.hosts.pop(iid), remove) for iid, remove in going]

        def stop(item: tuple[SimHost, bool]) -> tuple[SimHost, float, Exception | None]:
            host, remove = item
            started = time.monotonic()
            try:
                host.stop(remove_disk=remove)
            except Exception as exc:  # phase boundary; the sweep of the next start retries
                return host, time.monotonic() - started, exc
            return host, time.monotonic() - started, None

        for host, took, exc in self._map(stop, hosts):
            if exc is not None:
                log.error("host %s: teardown failed: %s", host.spec.instance_id, exc)
            else:
                log.info("host %s (%s) torn down in %.3fs", host.spec.instance_id, host.spec.name, took)

    def _poll_states(self) -> bool:
        changed = False
        for iid, host in list(self.hosts.items()):
            before = host.ready_after
            state = host.poll()
            if state == "failed":
                log.error("host %s (%s): %s", iid, host.spec.name, host.error)
                self._forget_failed(host, host.error)
                changed = True
            elif state == "ready" and before is None:
                self.failed.pop(iid, None)  # the back-off grows until a boot succeeds
                log.info("host %s (%s) ready after %.3fs", iid, host.spec.name, host.ready_after or 0.0)
                changed = True
        return changed

    def shutdown(self, *, remove_lab: bool = False) -> None:
        """Tear every host down (and the lab with ``remove_lab``); publish an empty status."""
        self._teardown_many([(iid, False) for iid in self.hosts])
        if labnet.owns_lab(self.lab, str(self.state_dir)):
            sweep(self.state_dir, self.lab)
        if remove_lab:
            labnet.release_lab(self.lab, str(self.state_dir))
        remove_control_dir(self.state_dir)
        self._publish(force=True, running=False)

    def serve(self, stop: threading.Event, poll_interval: float = 0.5) -> None:
        """Reconcile until ``stop`` is set, then shut down."""
        while not stop.is_set():
            try:
                self.reconcile_once()
            except Exception:  # the loop must outlive any single pass
                log.exception("reconcile pass failed")
            stop.wait(poll_interval)

    # ------------------------------------------------------------------ status

    def status(self, running: bool = True) -> dict[str, Any]:
        """The status document written to ``hosts/hosts.json``."""
        hosts = [h.to_json(h.poll()) for h in self.hosts.values()]
        hosts += [
            {"id": iid, "state": "failed", "error": f.error, "attempts": f.attempts} for iid, f in self.failed.items()
        ]
        hosts += [{"id": iid, "state": "skipped", "error": why} for iid, why in self.skipped.items()]
        return {
            "manager_pid": os.getpid() if running else None,
            "running": running,
            "lab": self.lab.to_json(),
            "known_hosts": str(known_hosts_path(self.state_dir)),
            "hosts": sorted(hosts, key=lambda h: str(h.get("name", h["id"]))),
        }

    def _publish(self, *, force: bool, running: bool = True) -> None:
        status = self.status(running)
        if not force and status == self._last_status:
            return
        self._last_status = status
        write_known_hosts(
            known_hosts_path(self.state_dir),
            [h.known_host() for h in self.hosts.values() if h.host_key.exists()],
        )
        body = dict(status, updated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        path = self.hosts_dir / STATUS_FILE
        tmp = path.with_name(STATUS_FILE + ".tmp")
        tmp.write_text(json.dumps(body, indent=1) + "\n")
        durable.replace(tmp, path)


def read_status(state_dir: Path) -> dict[str, Any] | None:
    """The last status the host manager published, or ``None``."""
    try:
        data = json.loads((state_dir / "hosts" / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def sweep(state_dir: Path, lab: labnet.LabConfig, keep: set[str] | None = None) -> None:
    """Kill and remove everything of ``lab``'s hosts not in ``keep`` (instance ids).

    Used at manager start (leftovers of a crash), at shutdown and by ``xceprov sim down``: boot
    processes recorded in ``host.json``, host namespaces with the lab's prefix, stray veths on
    the lab bridge.
    """
    keep = keep or set()
    hosts_dir = state_dir / "hosts"
    if hosts_dir.is_dir():
        for d in hosts_dir.iterdir():
            if d.is_dir() and d.name not in keep and (d / "host.json").exists():
                sweep_host_dir(d)
    keep_ns = {lab.host_netns(i) for i in keep}
    for ns in labnet.host_netns_of(lab):
        if ns not in keep_ns:
            labnet.delete_netns(ns)
    for veth in labnet.stray_host_veths(lab, {lab.host_veth(i) for i in keep}):
        labnet.ip("-n", lab.netns, "link", "del", veth, check=False)


def run_forever(
    state_dir: Path,
    lab: labnet.LabConfig,
    *,
    poll_interval: float = 0.5,
    ssh_delay: float = 0.0,
    remove_lab: bool = False,
    source: InstanceSource | None = None,
) -> int:
    """The ``serve`` command: start, reconcile until SIGTERM/SIGINT, shut down; returns the exit code."""
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    # One host manager per state directory: a second one would sweep the first one's hosts.
    lock_path = state_dir / "run" / "host-manager.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = open(lock_path, "a")  # noqa: SIM115 - held for the life of the process
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise HostManagerRunning(f"another host manager already runs for {state_dir}") from None
    manager = HostManager(state_dir, lab, source or CloudStoreSource(state_dir / "cloud.sqlite"), ssh_delay=ssh_delay)
    try:
        manager.start()
        log.info("host manager up: lab %s on %s, gateway %s", lab.name, lab.subnet, lab.gateway)
        manager.serve(stop, poll_interval)
    finally:
        manager.shutdown(remove_lab=remove_lab)
        log.info("host manager stopped")
        lock.close()
    return 0
