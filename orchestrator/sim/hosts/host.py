"""One simulated host: its directory, its namespaces, its boot process and its teardown.

Directory ``<sim_state_dir>/hosts/<instance-id>/``:

- ``upper/<dir>``, ``work/<dir>``: the copy-on-write layers over /etc, /opt, /root, /var, /home,
  /srv and /usr (the host's "disk"; kept while the instance exists, removed when it is
  terminated). An instance launched from an image finds ``upper/etc/xce`` and ``upper/opt/xce``
  already there: the cloud seeds them before the launch is recorded (``sim/cloud/images.py``);
- ``ssh_host_ed25519_key`` (+ ``.pub``): the host key, recorded in ``hosts/known_hosts``;
- ``boot.json`` (what the boot process does), ``boot.log`` (its output and sshd's);
- ``host.json``: pid, namespace and veth of the running host, so that a host manager that
  crashed can be cleaned up after by the next one (``sweep``).

Teardown (``SimHost.stop``): SIGKILL every process of the host's network namespace (the first
process is ``unshare``, which ignores SIGTERM; the kernel kills the rest of a PID namespace with
its first process), ``wait()`` for the boot process so no zombie lingers, delete the veth and
the namespace, close ssh control connections. Mounts live only in the host's own mount
namespace and vanish with its last process: nothing is mounted in the root namespace except
the ``/run/netns/<name>`` handle, which ``ip netns del`` removes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import durable
from orchestrator.sim.hosts import lab as labnet
from orchestrator.sim.hosts.keys import KnownHost, close_control_connections, generate_key

SSH_PORT = 22


def hostname_for(name: str) -> str:
    """The host name a simulated host takes for an instance name: letters, digits, ``-`` and ``.``, at most 63.

    The same text is used in known_hosts and the ssh_config, where spaces or commas would break
    the file, and ``sethostname`` refuses more than 64 bytes.
    """
    cleaned = re.sub(r"[^A-Za-z0-9.-]+", "-", name).strip("-.")[:63].rstrip("-.")
    return cleaned or "host"


@dataclass(frozen=True)
class HostSpec:
    """What a host is made from: the instance as the cloud store reports it, plus the SSH delay knob."""

    instance_id: str
    name: str
    address: str
    user_data: str = ""
    ssh_delay: float = 0.0


@dataclass
class SimHost:
    """A simulated host of ``spec`` in ``lab``, with its directory under ``hosts_dir``."""

    spec: HostSpec
    lab: labnet.LabConfig
    hosts_dir: Path
    authorized_key: str
    state_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready_after: float | None = None
    error: str = ""
    _log_fh: Any = field(default=None, repr=False)

    @property
    def dir(self) -> Path:
        """The host's own directory."""
        return self.hosts_dir / self.spec.instance_id

    @property
    def netns(self) -> str:
        """The host's network namespace."""
        return self.lab.host_netns(self.spec.instance_id)

    @property
    def veth(self) -> str:
        """The host's veth on the lab bridge."""
        return self.lab.host_veth(self.spec.instance_id)

    @property
    def host_key(self) -> Path:
        """The host's private host key."""
        return self.dir / "ssh_host_ed25519_key"

    def known_host(self) -> KnownHost:
        """This host's line of known_hosts."""
        pub = self.host_key.with_name(self.host_key.name + ".pub").read_text().strip()
        return KnownHost(self.spec.name, self.spec.address, pub)

    def boot_spec(self) -> dict[str, Any]:
        """The JSON the boot process reads (``boot.py``)."""
        return {
            "instance_id": self.spec.instance_id,
            "name": self.spec.name,
            "address": self.spec.address,
            "gateway": str(self.lab.gateway),
            "host_dir": str(self.dir.resolve()),
            "authorized_keys": self.authorized_key,
            "user_data": self.spec.user_data,
            "ssh_delay": self.spec.ssh_delay,
            "ssh_port": SSH_PORT,
            "sshd": shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin") or "/usr/sbin/sshd",
        }

    def start(self) -> None:
        """Generate the host key if needed, make the network namespace and start the boot process."""
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        generate_key(self.host_key, f"root@{self.spec.name}")
        (self.dir / "boot.json").write_text(json.dumps(self.boot_spec(), indent=1))
        labnet.attach_host(self.lab, self.netns, self.veth, self.spec.address)
        argv = [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--uts",
            "--mount",
            "--pid",
            "--fork",
            "--kill-child",
            "--mount-proc",
            "--propagation",
            "slave",
            sys.executable,
            "-m",
            "orchestrator.sim.hosts.boot",
            str((self.dir / "boot.json").resolve()),
        ]
        self._log_fh = open(self.dir / "boot.log", "ab")  # noqa: SIM115 - lives as long as the host
        self.started_at = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=self._log_fh,
                stderr=subprocess.STDOUT,
                env=_boot_env(),
                start_new_session=True,
            )
        except OSError:
            self._close_log()
            labnet.detach_host(self.lab, self.netns, self.veth)
            raise
        self._record()

    def _record(self) -> None:
        data = {
            "instance_id": self.spec.instance_id,
            "name": self.spec.name,
            "address": self.spec.address,
            "netns": self.netns,
            "veth": self.veth,
            "lab": self.lab.to_json(),
            "pid": self.proc.pid if self.proc else None,
            "manager_pid": os.getpid(),
        }
        tmp = self.dir / "host.json.tmp"
        tmp.write_text(json.dumps(data, indent=1))
        durable.replace(tmp, self.dir / "host.json")

    def poll(self) -> str:
        """``booting``, ``ready`` (sshd accepts connections) or ``failed`` (the boot process exited)."""
        if self.proc is None:
            return "failed" if self.error else "stopped"
        if self.proc.poll() is not None:
            if not self.error:
                self.error = f"boot process exited with {self.proc.returncode}; see {self.dir / 'boot.log'}"
            return "failed"
        if self.ready_after is not None:
            return "ready"
        if port_open(self.spec.address, SSH_PORT):
            self.ready_after = time.monotonic() - self.started_at
            return "ready"
        return "booting"

    def wait_ready(self, timeout: float) -> bool:
        """Poll until the host is ready (True) or failed or ``timeout`` passed (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.poll()
            if state == "ready":
                return True
            if state == "failed":
                return False
            time.sleep(0.02)
        return False

    def stop(self, *, remove_disk: bool) -> None:
        """Tear the host down (see the module docstring); ``remove_disk`` also deletes its directory."""
        if labnet.netns_exists(self.netns):
            labnet.kill_netns_processes(self.netns)
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._close_log()
        labnet.detach_host(self.lab, self.netns, self.veth)
        close_control_connections(self.state_dir, self.spec.address)
        (self.dir / "host.json").unlink(missing_ok=True)
        if remove_disk:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _close_log(self) -> None:
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def to_json(self, state: str) -> dict[str, Any]:
        """One host as ``xceprov sim hosts list --json`` shows it."""
        return {
            "id": self.spec.instance_id,
            "name": self.spec.name,
            "address": self.spec.address,
            "state": state,
            "pid": self.proc.pid if self.proc else None,
            "netns": self.netns,
            "ssh_port": SSH_PORT,
            "ssh_delay": self.spec.ssh_delay,
            "ready_after": None if self.ready_after is None else round(self.ready_after, 3),
            "error": self.error,
        }


def _boot_env() -> dict[str, str]:
    # The boot process imports this package with the same interpreter, wherever it is installed.
    package_root = Path(__file__).resolve().parents[3]
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(package_root),
    }


def port_open(address: str, port: int, timeout: float = 0.2) -> bool:
    """Whether something accepts TCP connections at ``address:port`` right now."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def sweep_host_dir(host_dir: Path) -> None:
    """Kill and remove what a crashed manager left of the host recorded in ``host_dir/host.json``."""
    record = host_dir / "host.json"
    try:
        data = json.loads(record.read_text())
        lab = labnet.LabConfig.from_json(data["lab"])
    except (OSError, ValueError, KeyError):
        record.unlink(missing_ok=True)
        return
    pid = data.get("pid")
    if isinstance(pid, int) and _is_boot_process(pid, host_dir):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    labnet.detach_host(lab, str(data["netns"]), str(data["veth"]))
    close_control_connections(host_dir.parent.parent, str(data.get("address", "")))
    record.unlink(missing_ok=True)


def _is_boot_process(pid: int, host_dir: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str((host_dir / "boot.json").resolve()).encode() in cmdline
