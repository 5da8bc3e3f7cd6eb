"""The lab network of the simulated hosts: one bridge in its own namespace, a gateway in the root one.

Layout (product defaults; every name is derived from the lab name, so tests run their own lab
next to the product's)::

    root namespace                 lab namespace xcelab-<lab>         host namespace xcehost-<lab>-<id>
    xg-<lab> 10.213.0.1/16  ==veth==  gw0 ─┐
                                           br0 ── xh<hash> ==veth==  eth0 <instance address>/16
                                           br0 ── ...

- The bridge lives in the lab namespace, so nothing of the lab is bridged to a real interface.
- The root namespace holds one end of a veth on the bridge with the gateway address: the
  orchestrator reaches hosts by address with no ProxyCommand, and processes inside hosts reach
  services listening on the gateway address in the root namespace (the simulated controller
  listens on ``10.213.0.1:7441``).
- Nothing leaves the lab: hosts have only the connected route of the lab subnet (no default
  route), IPv6 is off on every lab interface, and IPv4 forwarding is off on the gateway
  interface, so even a host that adds a route through the gateway gets nothing forwarded.

Everything here needs root (network namespaces). Costs: a handful of ``ip`` invocations per
host (about 2-5 ms each).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from orchestrator.errors import FinalError

LAB_SPACE: Final = ipaddress.IPv4Network("10.213.0.0/16")
DEFAULT_LAB_NAME: Final = "xce"
_LAB_NAME = re.compile(r"^[a-z0-9]{1,8}$")
_NETNS_DIR: Final = Path("/run/netns")


class LabError(FinalError):
    """The lab network could not be set up or torn down; the message says which step failed."""


@dataclass(frozen=True)
class LabConfig:
    """Names and addresses of one lab. The product default is ``xce`` on 10.213.0.0/16."""

    name: str = DEFAULT_LAB_NAME
    subnet: ipaddress.IPv4Network = LAB_SPACE

    def __post_init__(self) -> None:
        if not _LAB_NAME.match(self.name):
            raise LabError(f"lab name {self.name!r} must be 1-8 characters of a-z and 0-9")
        if not self.subnet.subnet_of(LAB_SPACE) or self.subnet.prefixlen > 29:
            raise LabError(f"lab subnet {self.subnet} must lie inside {LAB_SPACE} (a /16 to a /29)")

    @classmethod
    def parse(cls, name: str, subnet: str) -> LabConfig:
        """A configuration from text (``--lab-name``, ``--lab-subnet``); errors are one line."""
        try:
            net = ipaddress.IPv4Network(subnet, strict=True)
        except ValueError as exc:
            raise LabError(f"lab subnet {subnet!r}: {exc}") from None
        return cls(name=name, subnet=net)

    @property
    def gateway(self) -> ipaddress.IPv4Address:
        """The gateway address (first address of the subnet), held by the root namespace."""
        return self.subnet.network_address + 1

    @property
    def netns(self) -> str:
        """The lab namespace holding the bridge."""
        return f"xcelab-{self.name}"

    @property
    def gateway_if(self) -> str:
        """The root namespace's end of the gateway veth."""
        return f"xg-{self.name}"

    @property
    def host_netns_prefix(self) -> str:
        """Every host namespace of this lab starts with this."""
        return f"xcehost-{self.name}-"

    def host_netns(self, instance_id: str) -> str:
        """The network namespace of one host."""
        return self.host_netns_prefix + _safe(instance_id)

    def host_veth(self, instance_id: str) -> str:
        """The bridge-side veth of one host (in the lab namespace; 12 characters, under IFNAMSIZ)."""
        return "xh" + hashlib.sha1(f"{self.name}/{instance_id}".encode()).hexdigest()[:10]

    def holds(self, address: str) -> bool:
        """Whether ``address`` is a host address of this lab (not the network, gateway or broadcast)."""
        try:
            addr = ipaddress.IPv4Address(address)
        except ValueError:
            return False
        return addr in self.subnet and addr not in (
            self.subnet.network_address,
            self.gateway,
            self.subnet.broadcast_address,
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready description (``xceprov sim status --json``)."""
        return {
            "name": self.name,
            "subnet": str(self.subnet),
            "gateway": str(self.gateway),
            "gateway_interface": self.gateway_if,
            "netns": self.netns,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LabConfig:
        """The inverse of ``to_json``."""
        return cls.parse(str(data["name"]), str(data["subnet"]))


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:200]


# ------------------------------------------------------------------------------ ip helpers


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``ip ARGS``; with ``check`` a failure raises ``LabError`` with ip's own message."""
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"ip {' '.join(args)}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc


def ip_json(*args: str) -> list[dict[str, Any]]:
    """``ip -j ARGS`` parsed; an empty list when ip prints nothing."""
    out = ip("-j", *args).stdout.strip()
    data = json.loads(out) if out else []
    return data if isinstance(data, list) else []


def netns_list() -> list[str]:
    """Names of the network namespaces ``ip netns`` knows."""
    try:
        return sorted(p.name for p in _NETNS_DIR.iterdir())
    except FileNotFoundError:
        return []


def netns_exists(name: str) -> bool:
    """Whether the named network namespace exists."""
    return (_NETNS_DIR / name).exists()


def link_exists(name: str, netns: str | None = None) -> bool:
    """Whether interface ``name`` exists (in ``netns`` or the root namespace)."""
    args = ["-n", netns] if netns else []
    return ip(*args, "link", "show", "dev", name, check=False).returncode == 0


def netns_pids(name: str) -> list[int]:
    """Processes whose network namespace is ``name`` (``ip netns pids``)."""
    proc = ip("netns", "pids", name, check=False)
    return [int(p) for p in proc.stdout.split() if p.isdigit()]


def kill_netns_processes(name: str, timeout: float = 5.0) -> None:
    """SIGKILL every process in network namespace ``name`` until none is left.

    SIGKILL because ``unshare --fork`` ignores SIGTERM; killing a PID namespace's first process
    makes the kernel kill the rest of it, and the loop catches anything forked meanwhile.
    Raises ``LabError`` if processes survive ``timeout`` (a process stuck in the kernel).
    """
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in netns_pids(name) if p != os.getpid() and not _is_zombie(p)]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise LabError(f"processes {pids} in network namespace {name} survive SIGKILL")
        time.sleep(0.02)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def delete_netns(name: str) -> None:
    """Kill what runs in ``name`` and delete it (idempotent)."""
    if not netns_exists(name):
        return
    kill_netns_processes(name)
    proc = ip("netns", "del", name, check=False)
    if proc.returncode != 0 and netns_exists(name):
        raise LabError(f"ip netns del {name}: {proc.stderr.strip()}")


def _write_sysctl(path: str, value: str) -> None:
    Path(path).write_text(value)


# ------------------------------------------------------------------------------ the lab


def ensure_lab(lab: LabConfig) -> None:
    """Create the lab (namespace, bridge, gateway veth with the gateway address); idempotent."""
    _check_subnet_free(lab)
    if not netns_exists(lab.netns):
        ip("netns", "add", lab.netns)
    # IPv6 off before any interface exists there, so no link-local address ever appears.
    subprocess.run(
        [
            "ip",
            "netns",
            "exec",
            lab.netns,
            "sysctl",
            "-qw",
            "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1",
        ],
        capture_output=True,
        check=False,
    )
    if not link_exists("br0", lab.netns):
        ip("-n", lab.netns, "link", "add", "br0", "type", "bridge")
    ip("-n", lab.netns, "link", "set", "br0", "up")
    if not link_exists(lab.gateway_if):
        ip("link", "add", lab.gateway_if, "type", "veth", "peer", "name", "gw0", "netns", lab.netns)
    ip("-n", lab.netns, "link", "set", "gw0", "master", "br0", "up")
    conf = f"/proc/sys/net/ipv6/conf/{lab.gateway_if}/disable_ipv6"
    if Path(conf).exists():
        _write_sysctl(conf, "1")
    # Per-interface IPv4 forwarding decides for packets arriving on that interface: nothing a
    # host sends to the gateway is ever routed on, whatever the machine's global setting.
    _write_sysctl(f"/proc/sys/net/ipv4/conf/{lab.gateway_if}/forwarding", "0")
    want = f"{lab.gateway}/{lab.subnet.prefixlen}"
    have = {
        f"{a['local']}/{a['prefixlen']}"
        for link in ip_json("addr", "show", "dev", lab.gateway_if)
        for a in link.get("addr_info", [])
        if a.get("family") == "inet"
    }
    if want not in have:
        ip("addr", "add", want, "dev", lab.gateway_if)
    ip("link", "set", lab.gateway_if, "up")


def _check_subnet_free(lab: LabConfig) -> None:
    """Refuse a subnet some other root-namespace interface already serves with the same prefix."""
    for link in ip_json("addr", "show"):
        if link.get("ifname") == lab.gateway_if:
            continue
        for a in link.get("addr_info", []):
            if a.get("family") != "inet":
                continue
            net = ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False)
            if net == lab.subnet:
                raise LabError(
                    f"lab subnet {lab.subnet} is already served by interface {link.get('ifname')}; "
                    "choose another lab subnet"
                )


_OWNERS: Final = Path("/run/xcesim/labs")
_LOCK: Final = Path("/run/lock/xcesim-labs.lock")


@contextlib.contextmanager
def labs_locked() -> Iterator[None]:
    """One machine-wide lock for choosing, claiming and removing labs."""
    import fcntl

    _LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def lab_owner(lab: LabConfig) -> str | None:
    """The simulated world (its state directory) that claimed ``lab``, if any."""
    try:
        return (_OWNERS / lab.name).read_text().strip() or None
    except OSError:
        return None


def claim_lab(lab: LabConfig, owner: str) -> None:
    """Create ``lab`` for ``owner`` (a state directory), or reuse it if ``owner`` already has it.

    Refuses a lab another world holds: two worlds on one lab would sweep each other's hosts.
    The claim lives in /run (gone at reboot, like the namespaces).
    """
    with labs_locked():
        current = lab_owner(lab)
        if current not in (None, owner) and lab_exists(lab):
            raise LabError(
                f"lab {lab.name} ({lab.subnet}) belongs to the simulated world at {current}; "
                "run 'xceprov sim down' there, or choose another --lab-name and --lab-subnet"
            )
        ensure_lab(lab)
        _OWNERS.mkdir(parents=True, exist_ok=True)
        (_OWNERS / lab.name).write_text(owner + "\n")


def owns_lab(lab: LabConfig, owner: str) -> bool:
    """Whether ``owner`` may sweep and remove ``lab`` (it claimed it, or nobody did)."""
    return lab_owner(lab) in (None, owner)


def release_lab(lab: LabConfig, owner: str) -> bool:
    """Remove ``lab`` if ``owner`` holds it (or nobody does); returns whether it was removed."""
    with labs_locked():
        if not owns_lab(lab, owner):
            return False
        destroy_lab(lab)
        return True


def lab_exists(lab: LabConfig) -> bool:
    """Whether the lab's namespace or gateway interface exists."""
    return netns_exists(lab.netns) or link_exists(lab.gateway_if)


def host_netns_of(lab: LabConfig) -> list[str]:
    """Host namespaces of this lab that exist now."""
    return [n for n in netns_list() if n.startswith(lab.host_netns_prefix)]


def destroy_lab(lab: LabConfig) -> None:
    """Remove every host namespace of the lab, the gateway veth and the lab namespace (idempotent)."""
    for name in host_netns_of(lab):
        delete_netns(name)
    if link_exists(lab.gateway_if):
        ip("link", "del", lab.gateway_if, check=False)
    delete_netns(lab.netns)
    (_OWNERS / lab.name).unlink(missing_ok=True)


def attach_host(lab: LabConfig, netns: str, veth: str, address: str) -> None:
    """Create host namespace ``netns`` with ``eth0`` at ``address`` on the lab bridge.

    The veth is created inside the lab namespace with its peer placed straight into the host
    namespace as ``eth0``, so no interface of the lab ever appears in the root namespace.
    """
    if link_exists(veth, lab.netns):
        # A leftover of a host that died without teardown: its name is ours to reuse.
        ip("-n", lab.netns, "link", "del", veth, check=False)
    if netns_exists(netns):
        delete_netns(netns)
    ip("netns", "add", netns)
    try:
        ip(
            "-n", lab.netns, "link", "add", veth, "type", "veth",
            "peer", "name", "eth0", "address", host_mac(lab, address), "netns", netns,
        )  # fmt: skip
        ip("-n", lab.netns, "link", "set", veth, "master", "br0", "up")
        ip("-n", netns, "addr", "add", f"{address}/{lab.subnet.prefixlen}", "dev", "eth0")
        ip("-n", netns, "link", "set", "eth0", "up")
        ip("-n", netns, "link", "set", "lo", "up")
    except LabError:
        detach_host(lab, netns, veth)
        raise


def host_mac(lab: LabConfig, address: str) -> str:
    """The MAC of the host holding ``address``: derived from the address, so always the same.

    A host recreated on an address (a restart, a new instance reusing a terminated one's
    address) then answers to the MAC that the gateway and other hosts may still have cached;
    random MACs would leave them sending to a vanished interface until their ARP entries expire.
    """
    lab_byte = hashlib.sha1(lab.name.encode()).digest()[0]
    octets = ipaddress.IPv4Address(address).packed
    return ":".join(f"{b:02x}" for b in (0x02, lab_byte, *octets))


def detach_host(lab: LabConfig, netns: str, veth: str) -> None:
    """Kill what runs in the host namespace, delete its veth and the namespace (idempotent).

    The veth is deleted explicitly because namespace destruction is asynchronous in the kernel:
    relying on it would let a quickly recreated host trip over the old interface name.
    """
    if netns_exists(netns):
        kill_netns_processes(netns)
    if netns_exists(lab.netns) and link_exists(veth, lab.netns):
        ip("-n", lab.netns, "link", "del", veth, check=False)
    delete_netns(netns)


def stray_host_veths(lab: LabConfig, keep: set[str]) -> list[str]:
    """Host veths on the lab bridge that belong to no host in ``keep``."""
    if not netns_exists(lab.netns):
        return []
    return [
        str(link["ifname"])
        for link in ip_json("-n", lab.netns, "link", "show")
        if str(link.get("ifname", "")).startswith("xh") and link["ifname"] not in keep
    ]
