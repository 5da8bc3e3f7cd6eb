"""The boot of one simulated host, run as the first process of its own namespaces.

The host manager starts, for each host::

    ip netns exec xcehost-<lab>-<id> unshare --uts --mount --pid --fork --kill-child \\
        --mount-proc --propagation slave <python> -m orchestrator.sim.hosts.boot <host dir>/boot.json

and this module, now PID 1 of a fresh PID namespace with its own hostname, mount table and
network namespace:

1. detaches ``/run/netns`` (so this host holds no reference to other hosts' namespaces and their
   teardown is not delayed by us; the mount table is a *slave* of the root one for the same
   reason: unmounts there reach us);
2. mounts copy-on-write overlays over /etc, /opt, /root, /var, /home, /srv and /usr with
   upper and work dirs in the host's own directory, then tmpfs on /run and /tmp, then makes the
   rest of the real root file system read-only in this host: nothing a host does is written to
   the machine's own files;
3. sets the hostname (the instance name), writes /etc/hostname and /etc/hosts, turns IPv6 off;
4. installs its own sshd configuration, host key and the toolkit key in
   /root/.ssh/authorized_keys, and removes the machine's own host keys from its view of /etc;
5. applies the instance's user data (``cloudinit``) and prints the host keys sshd will serve on
   its console (stdout, i.e. ``boot.log``), as cloud-init's ``keys_to_console`` does; the cloud
   exposes that console (``console.py``);
6. runs the per-boot scripts (cloud-init's ``scripts_per_boot``: a baked image's boot hook), then
   writes ``result.json`` and ``boot-finished``: in a child process when there are scripts, as
   cloud-init's final stage runs beside sshd, so a hook that waits for its node manager's join
   does not hold SSH back; at once when there are none;
7. waits ``ssh_delay`` seconds (a host whose SSH comes up late) and execs ``sshd -D -e``, which
   stays PID 1 and reaps orphans (the per-boot child too). Its log goes to ``<host dir>/boot.log``.

Nothing here is imported by the manager; it only runs inside a host, as root.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

from orchestrator.sim.hosts.cloudinit import (
    apply_user_data,
    finish_boot,
    keys_to_console,
    per_boot_scripts,
    run_per_boot_scripts,
)

OVERLAY_DIRS = ("etc", "opt", "root", "var", "home", "srv", "usr")
MNT_DETACH = 2
MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096

SSHD_CONFIG = """\
# Simulated host {name}: written at boot by orchestrator.sim.hosts.boot.
Port {port}
ListenAddress 0.0.0.0
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile /run/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
X11Forwarding no
PrintMotd no
AcceptEnv LANG LC_*
Subsystem sftp internal-sftp
MaxStartups 100:30:200
MaxSessions 50
LogLevel INFO
"""

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _mount(source: str, target: str, fstype: str, options: str = "", flags: int = 0) -> None:
    if _libc.mount(source.encode(), target.encode(), fstype.encode(), flags, options.encode() or None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype} on {target} ({options}): {os.strerror(err)}")


def _umount_lazy(target: str) -> None:
    _libc.umount2(target.encode(), MNT_DETACH)


def _log(message: str) -> None:
    print(f"boot: {message}", file=sys.stderr, flush=True)


def boot(spec: dict[str, Any]) -> None:
    """Set the host up from ``spec`` (see ``SimHost.boot_spec``) and exec sshd; never returns on success."""
    started = time.monotonic()
    host_dir = Path(spec["host_dir"])
    name = str(spec["name"])
    address = str(spec["address"])
    # Everything needed from the host directory is read before /tmp is covered by a tmpfs
    # (the state directory may live under /tmp, as it does in tests).
    host_key = (host_dir / "ssh_host_ed25519_key").read_bytes()
    host_key_pub = (host_dir / "ssh_host_ed25519_key.pub").read_bytes()
    authorized = str(spec["authorized_keys"])

    if os.path.ismount("/run/netns"):
        _umount_lazy("/run/netns")
    for d in OVERLAY_DIRS:
        (host_dir / "upper" / d).mkdir(parents=True, exist_ok=True)
        (host_dir / "work" / d).mkdir(parents=True, exist_ok=True)
    # The layers are named through a descriptor opened before any overlay exists: when the state
    # directory lies under an overlaid directory (/root/..., /var/...), its path would otherwise
    # resolve through the first overlays, and an overlay cannot be another overlay's upper dir.
    # (It also keeps commas and colons of the path out of the mount options.)
    base_fd = os.open(host_dir, os.O_PATH | os.O_DIRECTORY)
    base = f"/proc/self/fd/{base_fd}"
    for d in OVERLAY_DIRS:
        _mount("overlay", f"/{d}", "overlay", f"lowerdir=/{d},upperdir={base}/upper/{d},workdir={base}/work/{d}")
    os.close(base_fd)
    _mount("tmpfs", "/run", "tmpfs", "mode=0755,size=64m")
    _mount("tmpfs", "/tmp", "tmpfs", "mode=1777,size=256m")
    # Everything else of the real root file system is read-only in this host (a flag of this
    # mount namespace's view only): a write outside the private directories fails instead of
    # landing on the machine. The overlays keep writing to their upper dirs.
    _mount("none", "/", "", "", MS_REMOUNT | MS_BIND | MS_RDONLY)
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    os.makedirs("/run/lock", mode=0o1777, exist_ok=True)

    socket.sethostname(name)
    Path("/etc/hostname").write_text(name + "\n")
    Path("/etc/hosts").write_text(f"127.0.0.1\tlocalhost\n{address}\t{name}\n{spec['gateway']}\txcesim-gateway\n")
    for knob in ("all", "default", "lo", "eth0"):
        conf = Path(f"/proc/sys/net/ipv6/conf/{knob}/disable_ipv6")
        if conf.exists():
            conf.write_text("1")

    ssh = Path("/etc/ssh")
    ssh.mkdir(parents=True, exist_ok=True)
    for old in ssh.glob("ssh_host_*"):
        old.unlink()
    for conf_d in (ssh / "sshd_config.d",):
        if conf_d.is_dir():
            shutil.rmtree(conf_d)
    (ssh / "sshd_config").write_text(SSHD_CONFIG.format(name=name, port=int(spec["ssh_port"])))
    key = ssh / "ssh_host_ed25519_key"
    key.write_bytes(host_key)
    os.chmod(key, 0o600)
    (ssh / "ssh_host_ed25519_key.pub").write_bytes(host_key_pub)
    root_ssh = Path("/root/.ssh")
    root_ssh.mkdir(mode=0o700, exist_ok=True)
    os.chmod(root_ssh, 0o700)
    (root_ssh / "authorized_keys").write_text(authorized.strip() + "\n")
    os.chmod(root_ssh / "authorized_keys", 0o600)

    instance_id = str(spec["instance_id"])
    result = apply_user_data(str(spec.get("user_data") or ""), instance_id)
    for err in result.errors:
        _log(f"cloud-init: {err}")
    # Read back from the files sshd is configured with: what is published is what it serves.
    sys.stdout.write(keys_to_console())
    sys.stdout.flush()
    if not per_boot_scripts():
        finish_boot(result, instance_id)
    elif os.fork() == 0:  # the final stage, beside sshd (which reaps this child)
        code = 0
        try:
            for err in run_per_boot_scripts():
                _log(f"cloud-init: {err}")
                result.errors.append(err)
            finish_boot(result, instance_id)
        except Exception as exc:  # the final stage must say why in boot.log, never take the boot down
            _log(f"cloud-init final stage failed: {type(exc).__name__}: {exc}")
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _log(f"ready for sshd after {time.monotonic() - started:.3f}s ({len(result.written)} files written)")

    delay = float(spec.get("ssh_delay") or 0)
    if delay > 0:
        _log(f"delaying sshd by {delay:g}s")
        time.sleep(delay)
    sshd = str(spec.get("sshd") or "/usr/sbin/sshd")
    os.execv(sshd, [sshd, "-D", "-e", "-f", "/etc/ssh/sshd_config"])


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m orchestrator.sim.hosts.boot SPEC.json``."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m orchestrator.sim.hosts.boot SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(args[0]).read_text())
    try:
        boot(spec)
    except Exception as exc:  # a failed boot must say why in boot.log, then die
        _log(f"failed: {type(exc).__name__}: {exc}")
        return 1
    return 0  # pragma: no cover - execv does not return


if __name__ == "__main__":
    sys.exit(main())
