"""A small, honest subset of cloud-init for simulated hosts: ``#cloud-config`` with ``write_files``.

What a simulated host does at boot with its instance's ``user_data``:

- ``#cloud-config`` YAML: the ``write_files`` module as cloud-init documents it: ``path``
  (required), ``content`` (default empty), ``encoding`` (``b64``/``base64``, ``gz``/``gzip``,
  ``gz+b64``/``gzip+base64`` and friends, else text), ``owner`` (``user[:group]``, default
  ``root:root``), ``permissions`` (octal string such as ``'0640'`` or a YAML integer, default
  ``0644``), ``append`` (default false) and ``defer`` (written after the others, as cloud-init's
  final stage would). Parent directories are created. Every other top-level key is recorded as
  ignored (this is not cloud-init), never an error.
- anything else (a shell script, MIME multipart, empty): nothing is applied; the result says so.

Then, like cloud-init's ``keys_to_console`` module, the host's SSH public keys (the files its
sshd serves: the ``.pub`` of each ``HostKey`` of ``/etc/ssh/sshd_config``) are printed on its console between
``-----BEGIN SSH HOST KEY KEYS-----`` and ``-----END SSH HOST KEY KEYS-----``
(``keys_to_console``); the cloud exposes the console (``orchestrator.sim.hosts.console``).

Then, like cloud-init's ``scripts_per_boot`` module (final stage), every executable regular
file of ``/var/lib/cloud/scripts/per-boot/`` runs, in name order, at every boot (a baked image's
boot hook lives there): its output goes to the console, a failing script does not stop the boot or
the scripts after it, and the failures are one error of ``result.json`` in cloud-init's own words
(``Runparts: 1 failures (50-x) in 2 attempted commands``).

Afterwards, like cloud-init: ``/var/lib/cloud/instances/<id>/`` (``user-data.txt``,
``boot-finished``), ``/var/lib/cloud/instance`` pointing at it, ``/var/lib/cloud/data/result.json``
(``{"v1": {"errors": [...]}}``) and ``/var/lib/cloud/data/instance-id``. A playbook waits for
``/var/lib/cloud/instance/boot-finished``, written last, after the per-boot scripts (as cloud-init
writes it at the end of its final stage).

The functions take a ``root`` so that they run against a directory in unit tests and against
``/`` inside a host (whose /etc, and hence user and group names, are the host's own).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import grp
import gzip
import json
import os
import pwd
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from orchestrator.model.published_keys import BEGIN, END

_DEFAULT_PERMS = 0o644
_B64 = {"b64", "base64"}
_GZ = {"gz", "gzip"}
_GZ_B64 = {"gz+b64", "gz+base64", "gzip+b64", "gzip+base64"}
# cloud-init's scripts_per_boot directory (under the host's root).
PER_BOOT_DIR = "var/lib/cloud/scripts/per-boot"
# What a per-boot script finds in its environment: a boot's, not the host manager's (whose
# PYTHONPATH or virtualenv must not leak into what the script starts).
SCRIPT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}


@dataclass
class CloudInitResult:
    """What the boot did with the user data: files written, errors (one line each), ignored keys."""

    kind: str  # "cloud-config", "none" or "unsupported"
    written: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The JSON stored in ``/var/lib/cloud/data/result.json`` (under ``v1``)."""
        return {"kind": self.kind, "written": self.written, "errors": self.errors, "ignored": self.ignored}


def parse_user_data(user_data: str) -> tuple[str, dict[str, Any]]:
    """Classify ``user_data`` and parse it if it is ``#cloud-config``.

    Returns ``(kind, config)``: ``("cloud-config", {...})``, ``("none", {})`` for empty user data
    or ``("unsupported", {})`` for anything else. A ``#cloud-config`` that is not a YAML mapping
    raises ``ValueError`` with a one-line reason.
    """
    text = user_data.lstrip("\ufeff")
    if not text.strip():
        return "none", {}
    first = text.splitlines()[0].strip()
    if first != "#cloud-config":
        return "unsupported", {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"user data is not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        return "cloud-config", {}
    if not isinstance(data, dict):
        raise ValueError(f"#cloud-config must be a mapping, not {type(data).__name__}")
    return "cloud-config", data


def decode_content(content: object, encoding: object) -> bytes:
    """The bytes of one ``write_files`` entry, decoded as cloud-init does."""
    enc = str(encoding or "").strip().lower()
    raw = content if isinstance(content, bytes) else ("" if content is None else str(content)).encode()
    if enc in _GZ_B64:
        return gzip.decompress(base64.b64decode(raw))
    if enc in _B64:
        return base64.b64decode(raw)
    if enc in _GZ:
        return gzip.decompress(raw)
    return raw


def decode_permissions(value: object) -> int:
    """``'0640'``, ``'640'``, ``0o640`` (a YAML ``0640``) → 0o640; ``None`` → 0o644."""
    if value is None:
        return _DEFAULT_PERMS
    if isinstance(value, bool):
        raise ValueError(f"permissions {value!r} is not an octal mode")
    if isinstance(value, int):
        mode = value
    else:
        try:
            mode = int(str(value).strip(), 8)
        except ValueError:
            raise ValueError(f"permissions {value!r} is not an octal mode") from None
    if not 0 <= mode <= 0o7777:
        raise ValueError(f"permissions {value!r} is out of range")
    return mode


def _owner_ids(owner: object) -> tuple[int, int]:
    text = str(owner or "root:root")
    user, _, group = text.partition(":")
    uid = pwd.getpwnam(user).pw_uid
    gid = grp.getgrnam(group).gr_gid if group else pwd.getpwnam(user).pw_gid
    return uid, gid


def apply_write_files(entries: object, root: Path) -> CloudInitResult:
    """Apply a ``write_files`` list under ``root``; problems are recorded per entry, never raised."""
    result = CloudInitResult(kind="cloud-config")
    if entries is None:
        return result
    if not isinstance(entries, list):
        result.errors.append(f"write_files must be a list, not {type(entries).__name__}")
        return result
    ordered = [e for e in entries if not (isinstance(e, dict) and e.get("defer"))]
    ordered += [e for e in entries if isinstance(e, dict) and e.get("defer")]
    for index, entry in enumerate(ordered):
        if not isinstance(entry, dict) or not entry.get("path"):
            result.errors.append(f"write_files[{index}]: an entry needs a 'path'")
            continue
        path = str(entry["path"])
        if "source" in entry and "content" not in entry:
            result.errors.append(f"{path}: 'source' (download) is not supported by the simulated hosts")
            continue
        try:
            data = decode_content(entry.get("content"), entry.get("encoding"))
            mode = decode_permissions(entry.get("permissions"))
        except (ValueError, binascii.Error, OSError, EOFError) as exc:
            result.errors.append(f"{path}: {exc}")
            continue
        target = root / path.lstrip("/")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "ab" if entry.get("append") else "wb") as fh:
                fh.write(data)
            os.chmod(target, mode)
        except OSError as exc:
            result.errors.append(f"{path}: {exc.strerror or exc}")
            continue
        result.written.append(path)
        try:
            uid, gid = _owner_ids(entry.get("owner"))
            os.chown(target, uid, gid)
        except KeyError:
            owner = entry.get("owner")
            result.errors.append(f"{path}: unknown owner {owner!r} (file written, owned by root)")
        except OSError as exc:
            result.errors.append(f"{path}: chown: {exc.strerror or exc}")
    return result


def apply_user_data(user_data: str, instance_id: str, root: Path = Path("/")) -> CloudInitResult:
    """Apply ``user_data`` under ``root`` and write the instance's markers (not yet ``result.json``
    nor ``boot-finished``: :func:`finish_boot` writes them once the per-boot scripts ran)."""
    try:
        kind, config = parse_user_data(user_data)
    except ValueError as exc:
        result = CloudInitResult(kind="cloud-config", errors=[str(exc)])
    else:
        if kind == "cloud-config":
            result = apply_write_files(config.get("write_files"), root)
            result.ignored = sorted(k for k in config if k != "write_files")
        else:
            result = CloudInitResult(kind=kind)
            if kind == "unsupported":
                result.errors.append("user data is not #cloud-config; simulated hosts apply only write_files")
    cloud = root / "var/lib/cloud"
    inst = cloud / "instances" / instance_id
    inst.mkdir(parents=True, exist_ok=True)
    (inst / "user-data.txt").write_text(user_data)
    os.chmod(inst / "user-data.txt", 0o600)
    link = cloud / "instance"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(Path("instances") / instance_id)
    (cloud / "data").mkdir(parents=True, exist_ok=True)
    (cloud / "data" / "instance-id").write_text(instance_id + "\n")
    # A boot-finished of an earlier boot of this instance is not this boot's.
    (inst / "boot-finished").unlink(missing_ok=True)
    return result


def per_boot_scripts(root: Path = Path("/")) -> list[Path]:
    """The scripts a boot runs: executable regular files of ``PER_BOOT_DIR``, in name order
    (cloud-init's ``runparts``: anything else there is skipped)."""
    directory = root / PER_BOOT_DIR
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    return [directory / n for n in names if (directory / n).is_file() and os.access(directory / n, os.X_OK)]


def run_per_boot_scripts(root: Path = Path("/")) -> list[str]:
    """Run every per-boot script with the console as its output; the errors for ``result.json``.

    Like cloud-init's ``runparts``, a script that fails (non-zero exit, or cannot be executed)
    does not stop the others; the failures make one error naming them.
    """
    scripts = per_boot_scripts(root)
    failed: list[str] = []
    for script in scripts:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            code = subprocess.run([str(script)], stdin=subprocess.DEVNULL, env=SCRIPT_ENV, check=False).returncode
        except OSError as exc:
            print(f"{script}: cannot run: {exc.strerror or exc}", file=sys.stderr, flush=True)
            code = -1
        if code != 0:
            failed.append(script.name)
    if not failed:
        return []
    return [f"Runparts: {len(failed)} failures ({','.join(failed)}) in {len(scripts)} attempted commands"]


def finish_boot(result: CloudInitResult, instance_id: str, root: Path = Path("/")) -> None:
    """Write ``result.json`` and, last, ``boot-finished`` (what a playbook waits for)."""
    cloud = root / "var/lib/cloud"
    (cloud / "data" / "result.json").write_text(
        json.dumps({"v1": {"datasource": "DataSourceXcesim", **result.to_json()}}, indent=1) + "\n"
    )
    # cloud-init's own format: "<uptime> - <timestamp> - v. <version>".
    uptime = Path("/proc/uptime").read_text().split()[0] if Path("/proc/uptime").exists() else "0"
    stamp = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime())
    (cloud / "instances" / instance_id / "boot-finished").write_text(f"{uptime} - {stamp} - v. xcesim-0.1\n")


def run_cloud_init(user_data: str, instance_id: str, root: Path = Path("/")) -> CloudInitResult:
    """One whole boot's cloud-init under ``root``: user data, per-boot scripts, ``boot-finished`` last."""
    result = apply_user_data(user_data, instance_id, root)
    result.errors.extend(run_per_boot_scripts(root))
    finish_boot(result, instance_id, root)
    return result


def keys_to_console(root: Path = Path("/")) -> str:
    """cloud-init's host key block: the ``.pub`` of every ``HostKey`` in ``etc/ssh/sshd_config`` under ``root``.

    Only the keys sshd is configured to serve are published; empty when there is none.
    """
    try:
        config = (root / "etc/ssh/sshd_config").read_text()
    except OSError:
        return ""
    keys = []
    for line in config.splitlines():
        words = line.split()
        if len(words) == 2 and words[0].lower() == "hostkey":
            with contextlib.suppress(OSError):
                keys.append((root / (words[1].lstrip("/") + ".pub")).read_text().strip())
    keys = [k for k in keys if k]
    if not keys:
        return ""
    return "\n".join([BEGIN, *keys, END]) + "\n"
