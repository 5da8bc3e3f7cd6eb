"""SSH material of the simulated world: the toolkit key, host keys, known_hosts, an ssh_config.

- ``<sim_state_dir>/ssh/id_ed25519`` (+ ``.pub``): the toolkit's key pair; every host
  authorises its public key for root.
- ``<sim_state_dir>/hosts/<id>/ssh_host_ed25519_key``: one host key per host, generated before
  the host boots and kept while the instance exists (a stop/start keeps its key, like a disk).
- ``<sim_state_dir>/hosts/known_hosts``: one line per live host (``name,address key``),
  rewritten atomically whenever hosts come and go, so strict host-key checking stays on.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator import durable
from orchestrator.errors import FinalError


class SshKeyError(FinalError):
    """ssh-keygen failed; the message carries its output."""


def toolkit_key(state_dir: Path) -> Path:
    """Path of the toolkit's private key (it may not exist yet)."""
    return state_dir / "ssh" / "id_ed25519"


def known_hosts_path(state_dir: Path) -> Path:
    """The known_hosts file of the simulated hosts."""
    return state_dir / "hosts" / "known_hosts"


def generate_key(path: Path, comment: str) -> None:
    """Generate an ed25519 key pair at ``path`` (and ``path.pub``) unless it exists."""
    if path.exists() and path.with_name(path.name + ".pub").exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    for p in (path, path.with_name(path.name + ".pub")):
        p.unlink(missing_ok=True)
    proc = subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SshKeyError(f"ssh-keygen for {path}: {proc.stderr.strip() or proc.returncode}")
    os.chmod(path, 0o600)


def ensure_toolkit_key(state_dir: Path) -> Path:
    """The toolkit key pair, generated on first use; returns the private key's path."""
    key = toolkit_key(state_dir)
    key.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(key.parent, 0o700)
    generate_key(key, "xceprov-sim-toolkit")
    return key


def public_key(private: Path) -> str:
    """The one-line public key next to ``private``."""
    return private.with_name(private.name + ".pub").read_text().strip()


@dataclass(frozen=True)
class KnownHost:
    """One live host as known_hosts and ssh_config see it."""

    name: str
    address: str
    host_key_pub: str  # "ssh-ed25519 AAAA... comment"


def write_known_hosts(path: Path, hosts: Iterable[KnownHost]) -> None:
    """Rewrite ``path`` atomically with one line per host (names first, then the address)."""
    lines = []
    for h in sorted(hosts, key=lambda h: (h.address, h.name)):
        keytype, key = h.host_key_pub.split()[:2]
        lines.append(f"{h.name},{h.address} {keytype} {key}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(lines))
    durable.replace(tmp, path)


def control_dir(state_dir: Path) -> Path:
    """Where ssh control sockets of the generated ssh_config live.

    ``<state_dir>/ssh`` when its socket paths fit in a Unix socket address (108 bytes, and ssh
    adds a 17-character temporary suffix while it binds); otherwise a short directory in /tmp
    named after the state directory, so that it stays the same for every caller.
    """
    preferred = (state_dir / "ssh").resolve()
    if len(f"{preferred}/cm-root@255.255.255.255:65535") + 17 < 104:
        return preferred
    digest = hashlib.sha1(str(preferred).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"xcesim-cm-{digest}"


def render_ssh_config(state_dir: Path, hosts: Iterable[KnownHost], user: str = "root") -> str:
    """An ssh_config (for an operator, or Ansible with ``-F``) reaching every live host by name or address."""
    hosts = sorted(hosts, key=lambda h: (h.name, h.address))
    key = toolkit_key(state_dir).resolve()
    known = known_hosts_path(state_dir).resolve()
    out = [
        f"# Simulated hosts of {state_dir.resolve()} (xceprov sim hosts ssh-config)",
        "# Use: ssh -F <this file> <host name or address>",
        "",
    ]
    for h in hosts:
        out += [f"Host {h.name}", f"    HostName {h.address}", ""]
    patterns = " ".join(sorted({h.name for h in hosts} | {h.address for h in hosts}))
    out += [
        f"Host {patterns or 'none.invalid'}",
        f"    User {user}",
        f"    IdentityFile {key}",
        "    IdentitiesOnly yes",
        f"    UserKnownHostsFile {known}",
        "    StrictHostKeyChecking yes",
        "    PasswordAuthentication no",
        "    ConnectTimeout 5",
    ]
    ctl = control_dir(state_dir)
    ctl.mkdir(mode=0o700, parents=True, exist_ok=True)
    out += [
        "    ControlMaster auto",
        f"    ControlPath {ctl}/cm-%r@%h:%p",
        "    ControlPersist 60s",
    ]
    return "\n".join(out) + "\n"


def close_control_connections(state_dir: Path, address: str) -> int:
    """Ask every ssh control master of ``address`` (made with our ssh_config) to exit; returns how many."""
    closed = 0
    ctl = control_dir(state_dir)
    if not address or not ctl.is_dir():
        return 0
    for sock in ctl.glob(f"cm-*@{address}:*"):
        subprocess.run(
            ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", address],
            capture_output=True,
            check=False,
            timeout=10,
        )
        sock.unlink(missing_ok=True)
        closed += 1
    return closed


def remove_control_dir(state_dir: Path) -> None:
    """Remove the short control-socket directory in /tmp (see ``control_dir``) once it is empty."""
    ctl = control_dir(state_dir)
    if ctl != (state_dir / "ssh").resolve():
        with contextlib.suppress(OSError):
            ctl.rmdir()
