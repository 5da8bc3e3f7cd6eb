"""Stand-in simulated hosts for the Ansible tests: one sshd per host on its own loopback address.

The simplest variant from ``shared/notes/ansible-sim-hosts.md``: no network namespaces, each host
is ``unshare --uts --mount --pid --fork --kill-child --mount-proc`` around an sshd listening on
``127.x.y.z:<port>``, with copy-on-write overlays over /etc, /opt and /var (upper dirs in the
host's own directory) and an empty /root of its own so /etc/xce, /opt/xce and /var/lib/cloud
are private per host. Used until (and beside) the real simulated hosts of
``orchestrator.sim.hosts``; root only.

Also usable as a script (Molecule's create/destroy playbooks need hosts that outlive them)::

    python tests/loopback_hosts.py up DIR NAME... [--vars-file VARS.json] [--host-vars-file HV.json]
    python tests/loopback_hosts.py image DIR FROM NAME   # NAME starts from an image of FROM
    python tests/loopback_hosts.py down DIR

An *image* here is what the simulated cloud's images hold (``orchestrator.sim.cloud.images``:
/etc/xce, /opt/xce and /var/lib/cloud/scripts of a host's disk): the new host starts with those
files in its overlays. At every boot a host runs cloud-init's per-boot scripts
(/var/lib/cloud/scripts/per-boot, executable files in name order) beside sshd, before
boot-finished, as the simulated hosts do.

Layout of DIR mirrors the simulated world's: ``ssh/id_ed25519`` (the toolkit key),
``hosts/known_hosts``, ``hosts/<name>/`` (one host), ``hosts.json`` (what is running).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.clients.ansible.hostkeys import KeyTarget, Published
from orchestrator.model.published_keys import BEGIN, END
from orchestrator.sim.cloud.images import IMAGE_PATHS
from orchestrator.sim.hosts.host import port_open

SSHD = "/usr/sbin/sshd"
DEFAULT_PORT = 2200  # not 22: a system sshd on 0.0.0.0:22 would clash on the shared stack

# Inside the host: private hostname, overlays, tmpfs /run, its host key on the console, then sshd
# (after an optional delay, to simulate SSH that comes up late) and cloud-init's boot-finished marker.
_BOOT = r"""
set -e
hostname "$XH_NAME"
for d in etc opt var; do
  mkdir -p "$XH_DIR/upper/$d" "$XH_DIR/work/$d"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$XH_DIR/upper/$d,workdir=$XH_DIR/work/$d" "/$d"
done
mkdir -p /etc/xh "$XH_DIR/root/.ssh" /var/lib/cloud/instance
cp "$XH_DIR/sshd_config" "$XH_DIR/ssh_host_ed25519_key" /etc/xh/
chmod 600 /etc/xh/ssh_host_ed25519_key
chmod 700 "$XH_DIR/root/.ssh"
cp "$XH_DIR/authorized_keys" "$XH_DIR/root/.ssh/authorized_keys"
# A fresh /root, as on a new cloud host (the machine's dotfiles would slow every login). Last,
# because $XH_DIR itself may live under /root.
mount --bind "$XH_DIR/root" /root
mount -t tmpfs tmpfs /run
mkdir -p /run/sshd
rm -f /var/lib/cloud/instance/boot-finished
# cloud-init's keys_to_console: the key sshd serves, on the console (console.log).
echo '-----BEGIN SSH HOST KEY KEYS-----'
ssh-keygen -y -f /etc/xh/ssh_host_ed25519_key
echo '-----END SSH HOST KEY KEYS-----'
sleep "$XH_DELAY"
/usr/sbin/sshd -D -e -f /etc/xh/sshd_config &
# cloud-init's scripts_per_boot (a baked image's boot hook): a failure does not stop the boot.
for script in /var/lib/cloud/scripts/per-boot/*; do
  if [ -f "$script" ] && [ -x "$script" ]; then "$script" || echo "per-boot: $script failed"; fi
done
echo "$XH_NAME" > /var/lib/cloud/instance/boot-finished
wait
"""


@dataclass
class LoopbackHost:
    """One running host: its name, address, port and the pid of its ``unshare`` process."""

    name: str
    address: str
    port: int
    pid: int
    instance_id: str
    delay: float = 0.0


class LoopbackLab:
    """A set of loopback hosts sharing one directory, one toolkit key and one known_hosts."""

    def __init__(self, root: Path, port: int = DEFAULT_PORT) -> None:
        self.root = root
        self.port = port
        self.hosts: dict[str, LoopbackHost] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        (root / "ssh").mkdir(parents=True, exist_ok=True)
        (root / "hosts").mkdir(parents=True, exist_ok=True)
        self.key = root / "ssh" / "id_ed25519"
        if not self.key.exists():
            _keygen(self.key, "xceprov-toolkit")
        self.known_hosts = root / "hosts" / "known_hosts"
        self.known_hosts.touch()
        # A random /16 inside 127/8 per lab keeps parallel test runs apart.
        self._net = f"127.{random.randint(100, 250)}.{random.randint(1, 250)}"

    def start(self, name: str, delay: float = 0.0, record_key: bool = True, image_of: str = "") -> LoopbackHost:
        """Start one host; ``delay`` postpones its sshd and boot-finished (a late host);
        ``image_of``: the host starts with an image of that host's files (``IMAGE_PATHS``)."""
        hdir = self.root / "hosts" / name
        hdir.mkdir(parents=True)
        if image_of:
            for rel in IMAGE_PATHS:
                src = self.root / "hosts" / image_of / "upper" / rel
                if src.is_dir():
                    shutil.copytree(src, hdir / "upper" / rel, symlinks=True)
        address = f"{self._net}.{len(self.hosts) + 2}"
        _keygen(hdir / "ssh_host_ed25519_key", name)
        (hdir / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        (hdir / "sshd_config").write_text(
            "\n".join(
                [
                    f"ListenAddress {address}:{self.port}",
                    "HostKey /etc/xh/ssh_host_ed25519_key",
                    "PermitRootLogin prohibit-password",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "PidFile /run/sshd.pid",
                    "AuthorizedKeysFile /root/.ssh/authorized_keys",
                    "StrictModes no",
                    "MaxStartups 100:30:200",
                    "MaxSessions 50",
                    "Subsystem sftp internal-sftp",
                    "",
                ]
            )
        )
        env = dict(os.environ, XH_NAME=name, XH_DIR=str(hdir), XH_DELAY=str(delay))
        with open(hdir / "console.log", "wb") as console:  # the child keeps its own descriptor
            proc = subprocess.Popen(
                ["unshare", "--uts", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "sh", "-c", _BOOT],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=console,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        host = LoopbackHost(name, address, self.port, proc.pid, f"i-{name}", delay)
        self.hosts[name] = host
        self._procs[name] = proc
        if record_key:
            pub = Path(hdir / "ssh_host_ed25519_key.pub").read_text().split()
            with self.known_hosts.open("a") as fh:
                fh.write(f"[{address}]:{self.port} {pub[0]} {pub[1]}\n")
        self._save()
        return host

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Wait until every host without a delay accepts TCP on its SSH port."""
        deadline = time.monotonic() + timeout
        for host in self.hosts.values():
            if host.delay:
                continue
            while not port_open(host.address, host.port):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{host.name}: sshd not up on {host.address}:{host.port}")
                time.sleep(0.02)

    def run_in(self, name: str, *argv: str) -> str:
        """Run a command inside a host's namespaces (as its init sees the world)."""
        pid = _first_child(self.hosts[name].pid)
        out = subprocess.run(
            ["nsenter", "-t", str(pid), "-m", "-u", "-p", "--", *argv],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout

    def stop_all(self) -> None:
        """Kill every host (SIGKILL: ``unshare --fork`` ignores SIGTERM) and reap it."""
        for name, host in list(self.hosts.items()):
            _kill(host.pid)
            proc = self._procs.pop(name, None)
            if proc is not None:
                proc.wait()
        self.hosts.clear()
        self._save()

    def inventory(self, host_vars: dict[str, dict[str, object]] | None = None, **extra_vars: object) -> dict[str, Any]:
        """A YAML-shaped Ansible inventory of the running hosts (group ``sim``); ``host_vars``:
        more variables of some hosts."""
        hostvars = {
            h.name: {
                "ansible_host": h.address,
                "ansible_port": h.port,
                "xce_instance_id": h.instance_id,
                **(host_vars or {}).get(h.name, {}),
            }
            for h in self.hosts.values()
        }
        common = {
            "ansible_user": "root",
            # The machine's own interpreter, not whatever a shim on PATH offers.
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": (f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes"),
        }
        common.update(extra_vars)  # type: ignore[arg-type]
        return {"all": {"vars": common, "children": {"sim": {"hosts": hostvars}}}}

    def _save(self) -> None:
        (self.root / "hosts.json").write_text(json.dumps([asdict(h) for h in self.hosts.values()], indent=1))

    @classmethod
    def reopen(cls, root: Path, port: int = DEFAULT_PORT) -> LoopbackLab:
        """The lab a script's ``up`` left running (its hosts and their network), to add hosts to."""
        lab = cls(root, port=port)
        for record in json.loads((root / "hosts.json").read_text()):
            host = LoopbackHost(**record)
            lab.hosts[host.name] = host
            lab._net = host.address.rsplit(".", 1)[0]
        return lab


class LoopbackConsoles:
    """The hosts' consoles (``hosts/<name>/console.log``) as a cloud would show them: a
    ``hostkeys.KeySource`` for ``bootstrap(published=...)``, where each host's key block is
    read instead of scanning it.

    ``forged``: host name -> a key line its console is made to show instead of the one it printed.
    """

    def __init__(self, lab: LoopbackLab, forged: dict[str, str] | None = None) -> None:
        self.lab = lab
        self.forged = forged or {}

    def publishes(self, target: KeyTarget) -> bool:
        """Every host of the lab has a console."""
        return target.name in self.lab.hosts

    def read(self, target: KeyTarget) -> Published | None:
        """The console so far, with the host's instance id and address."""
        host = self.lab.hosts[target.name]
        console = (self.lab.root / "hosts" / host.name / "console.log").read_text(errors="replace")
        if host.name in self.forged:
            console = f"{BEGIN}\n{self.forged[host.name]}\n{END}\n" if BEGIN in console else ""
        return Published(host.instance_id, host.address, console)


def _keygen(path: Path, comment: str) -> None:
    argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
    subprocess.run(argv, check=True)


def _first_child(pid: int) -> int:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return int(children[0])


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def sshd_available() -> bool:
    """Whether this machine can run loopback hosts (root, sshd, unshare)."""
    return os.geteuid() == 0 and Path(SSHD).exists() and shutil.which("unshare") is not None


NODE_MANAGER_STANDIN = r'''#!/usr/bin/env python3
"""Stand-in node manager used until orchestrator.sim.nodemanager lands: reads its JSON config,
runs a 'worker' child while the worker role is configured, records state in the state dir."""
import json, os, signal, subprocess, sys, time
cfg_path = sys.argv[sys.argv.index("--config") + 1]
cfg = json.load(open(cfg_path))
state = cfg.get("state_dir", "/var/lib/xce")
os.makedirs(state, exist_ok=True)
worker = None
if "worker" in cfg.get("roles", []):
    worker = subprocess.Popen(["sleep", "100000"])
with open(os.path.join(state, "status.json"), "w") as fh:
    json.dump({"roles": cfg.get("roles", []), "worker_pid": worker.pid if worker else None}, fh)
def stop(*_):
    if worker:
        worker.kill()
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
while True:
    time.sleep(1)
'''


def build_standin_artifact(dest: Path) -> Path:
    """A node manager tarball (``bin/xce-node-manager``) standing in for H5's artifact."""
    dest.mkdir(parents=True, exist_ok=True)
    staging = dest / "standin"
    (staging / "bin").mkdir(parents=True, exist_ok=True)
    script = staging / "bin" / "xce-node-manager"
    script.write_text(NODE_MANAGER_STANDIN)
    script.chmod(0o755)
    out = dest / "xce-node-manager-standin.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(staging / "bin", arcname="bin")
    return out


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("dir", type=Path)
    up.add_argument("names", nargs="+")
    up.add_argument("--port", type=int, default=DEFAULT_PORT)
    up.add_argument("--vars-file", type=Path, help="JSON object added to the inventory's all.vars")
    up.add_argument("--host-vars-file", type=Path, help="JSON object: host name -> its own variables")
    image = sub.add_parser("image")
    image.add_argument("dir", type=Path)
    image.add_argument("source")
    image.add_argument("name")
    down = sub.add_parser("down")
    down.add_argument("dir", type=Path)
    args = parser.parse_args(argv)
    if args.cmd == "up":
        lab = LoopbackLab(args.dir, port=args.port)
        for name in args.names:
            lab.start(name)
        lab.wait_ready()
        extra = json.loads(args.vars_file.read_text()) if args.vars_file else {}
        per_host = json.loads(args.host_vars_file.read_text()) if args.host_vars_file else {}
        (args.dir / "inventory.json").write_text(json.dumps(lab.inventory(per_host, **extra), indent=1))
        # The Popen objects die with this process; the hosts run on in their own sessions.
        return 0
    if args.cmd == "image":
        lab = LoopbackLab.reopen(args.dir)
        inventory = json.loads((args.dir / "inventory.json").read_text())
        lab.start(args.name, image_of=args.source)
        lab.wait_ready()
        hosts = inventory["all"]["children"]["sim"]["hosts"]
        fresh = lab.inventory()["all"]["children"]["sim"]["hosts"]
        hosts[args.name] = fresh[args.name]
        (args.dir / "inventory.json").write_text(json.dumps(inventory, indent=1))
        return 0
    hosts_file = args.dir / "hosts.json"
    if hosts_file.exists():
        for host in json.loads(hosts_file.read_text()):
            _kill(int(host["pid"]))
        hosts_file.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
