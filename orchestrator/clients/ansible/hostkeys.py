"""SSH host keys of provisioned hosts: recorded on first contact, pinned per instance afterwards.

Policy ``record`` (the default): a host the toolkit has never seen is scanned (``ssh-keyscan``,
retried until SSH answers or the deadline passes, so a host whose sshd comes up late is waited
for) and its keys are written to the toolkit's own known_hosts, keyed by cloud instance id.
Every later connection checks against the recorded keys with ``StrictHostKeyChecking=yes``: a
host presenting a different key fails as unreachable, it is never silently re-learnt. When a new
instance takes over an address, the old instance's keys are dropped (they belonged to another
machine); keys are never dropped for the same instance.

Policy ``strict``: nothing is scanned; a host must already have a key in the toolkit's
known_hosts (an operator put it there) or have published one (below), otherwise it is not
contacted and its result says so.

Published keys (both policies): where the cloud exposes what an instance printed on its console
at first boot (cloud-init's ``keys_to_console`` block, ``orchestrator.model.published_keys``),
a ``KeySource`` reads it by instance id, polled until ``publish_wait`` passes. A host whose
block appears is pinned with those keys and never scanned; its first SSH connection is already
checked against them. A block is refused, for that host, in one line and with nothing recorded,
when it is malformed, or when the cloud reports it for another instance or another address than
the record's. A host that publishes nothing in time is scanned (``record``) or not contacted
(``strict``). Published keys are pinned like scanned ones: per instance, and a later differing
key fails the host as unreachable.

An address that is neither an IP address nor an RFC 1123 host name is never scanned nor written
(``orchestrator.model.hostnames``): in known_hosts a comma or a newline is syntax.

Files: ``<state_dir>/ansible/known_hosts`` (what ssh reads) generated from
``<state_dir>/ansible/host_keys.json`` (instance id → address, port, keys).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from filelock import FileLock

from orchestrator import durable
from orchestrator.errors import AnsibleError
from orchestrator.model.hostnames import address_problem
from orchestrator.model.published_keys import PublishedKeyError, published_keys

Policy = Literal["record", "strict"]
Scanner = Callable[[str, int, float], list[str]]
MISMATCH_SCAN_TIMEOUT = 15.0


@dataclass(frozen=True)
class KeyTarget:
    """A host whose key is needed: inventory name, instance id, address and SSH port."""

    name: str
    instance_id: str
    address: str
    port: int = 22
    provider: str = ""


@dataclass(frozen=True)
class Published:
    """An instance's console as the cloud reports it: untrusted text, bound by the cloud to an id and address."""

    instance_id: str
    address: str
    console: str


class KeySource(Protocol):
    """Where published host keys are read (the cloud's console output of an instance)."""

    def publishes(self, target: KeyTarget) -> bool:
        """Whether this source can read ``target``'s console at all (else it is scanned at once)."""
        ...

    def read(self, target: KeyTarget) -> Published | None:
        """``target``'s console so far; ``None`` while there is none."""
        ...


def host_pattern(address: str, port: int) -> str:
    """How known_hosts names a host (``[addr]:port`` for ports other than 22)."""
    return address if port == 22 else f"[{address}]:{port}"


def keyscan(address: str, port: int, timeout: float) -> list[str]:
    """``ssh-keyscan`` of one host: ``"<type> <base64>"`` per key, [] when SSH does not answer.

    Asks for the ed25519 key first (one connection instead of one per key type); only a host
    that answers without one is asked for every type.
    """
    keys = _keyscan(address, port, timeout, "ed25519")
    return keys or _keyscan(address, port, timeout, "ecdsa,rsa")


def _keyscan(address: str, port: int, timeout: float, types: str) -> list[str]:
    try:
        out = subprocess.run(
            ["ssh-keyscan", "-T", str(max(1, int(timeout))), "-t", types, "-p", str(port), address],
            capture_output=True,
            text=True,
            timeout=timeout + 5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    keys = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and not line.startswith("#"):
            keys.append(f"{parts[1]} {parts[2]}")
    return sorted(set(keys))


class HostKeyStore:
    """The toolkit's known_hosts for provisioned hosts (see the module docstring)."""

    def __init__(self, directory: Path, scanner: Scanner = keyscan) -> None:
        self.directory = directory
        self.known_hosts = directory / "known_hosts"
        self.index_file = directory / "host_keys.json"
        self._scanner = scanner
        self._lock = FileLock(str(directory / ".host_keys.lock"), mode=0o600)

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = durable.parse_json(self.index_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise AnsibleError(f"{self.index_file}: unreadable host key record: {exc}") from None
        return data if isinstance(data, dict) else {}

    def _save(self, index: dict[str, dict[str, Any]]) -> None:
        durable.private_dir(self.directory)
        durable.write_bytes_atomic(self.index_file, (json.dumps(index, indent=1, sort_keys=True) + "\n").encode())
        lines: list[str] = []
        for rec in sorted(index.values(), key=lambda r: (r["address"], r["port"])):
            if address_problem(rec["address"]) is not None:
                continue  # a record written before addresses were checked: never a pattern
            pattern = host_pattern(rec["address"], int(rec["port"]))
            lines.extend(f"{pattern} {key}" for key in rec["keys"])
        durable.write_bytes_atomic(self.known_hosts, "".join(f"{line}\n" for line in lines).encode())

    def recorded(self) -> dict[str, dict[str, Any]]:
        """The record: instance id → {address, port, keys}."""
        return self._load()

    def ensure(
        self,
        targets: Iterable[KeyTarget],
        policy: Policy,
        wait: float,
        workers: int = 20,
        source: KeySource | None = None,
        publish_wait: float | None = None,
    ) -> dict[str, str]:
        """Make sure every target has pinned keys; returns ``{name: reason}`` for those that do not.

        ``source`` and ``publish_wait``: published keys looked for first, read at least once and
        polled until ``publish_wait`` passes (``None``: not looked for; see the module docstring).
        ``wait`` bounds how long a host that does not answer SSH yet is retried (record policy),
        counted from the call: a scan after the published keys' wait gets what is left of it.
        """
        durable.private_dir(self.directory)
        started = time.monotonic()
        targets = list(targets)
        problems: dict[str, str] = {}
        with self._lock:
            index = self._load()
            todo: list[KeyTarget] = []
            for t in targets:
                # Callers hand checked addresses (model.hostnames); this is the last line before
                # ssh-keyscan and known_hosts, where a comma or newline would be syntax.
                problem = address_problem(t.address)
                if problem is not None:
                    problems[t.name] = problem
                    continue
                rec = index.get(t.instance_id)
                if rec and rec["address"] == t.address and int(rec["port"]) == t.port and rec["keys"]:
                    continue
                todo.append(t)
            pool_size = max(1, min(workers, len(todo)))
            to_scan: list[KeyTarget] = []
            if source is not None and publish_wait is not None:
                watched = [t for t in todo if source.publishes(t)]
                to_scan = [t for t in todo if t not in watched]
                if watched:
                    deadline = started + publish_wait
                    with ThreadPoolExecutor(max_workers=pool_size) as pool:
                        found = list(pool.map(lambda t: (t, self._published_until(t, source, deadline)), watched))
                    for t, outcome in found:
                        if isinstance(outcome, str):
                            problems[t.name] = outcome
                        elif outcome is None:
                            to_scan.append(t)
                        else:
                            self._pin(index, t, outcome, "published", problems)
            else:
                to_scan = todo
            if policy == "strict":
                for t in to_scan:
                    problems[t.name] = (
                        f"no recorded or published SSH host key for {host_pattern(t.address, t.port)} "
                        f"(instance {t.instance_id}; host_key_policy is strict)"
                    )
                to_scan = []
            if to_scan:
                # One bound for the whole key step: a scan after the published keys' wait gets
                # what is left of ``wait`` (at least one try), not a second ``wait``.
                deadline = started + wait
                with ThreadPoolExecutor(max_workers=pool_size) as pool:
                    scanned = list(pool.map(lambda t: (t, self._scan_until(t, deadline)), to_scan))
                for t, keys in scanned:
                    if not keys:
                        problems[t.name] = (
                            f"SSH on {host_pattern(t.address, t.port)} did not answer within {wait:.0f} s "
                            "(no host key to record)"
                        )
                        continue
                    self._pin(index, t, keys, "scan", problems)
            self._save(index)
        return problems

    @staticmethod
    def _pin(
        index: dict[str, dict[str, Any]], t: KeyTarget, keys: list[str], origin: str, problems: dict[str, str]
    ) -> None:
        """Record ``keys`` for ``t``'s instance, unless they contradict what it was pinned with."""
        old = index.get(t.instance_id)
        if old and old["keys"] and not set(old["keys"]) & set(keys):
            problems[t.name] = (
                f"host key of instance {t.instance_id} at {host_pattern(t.address, t.port)} "
                "differs from the one recorded at first contact; not trusting it"
            )
            return
        # The address now belongs to this instance: forget keys of earlier instances there.
        for iid in [
            i for i, r in index.items() if i != t.instance_id and r["address"] == t.address and int(r["port"]) == t.port
        ]:
            del index[iid]
        index[t.instance_id] = {"address": t.address, "port": t.port, "keys": keys, "name": t.name, "origin": origin}

    def mismatch(self, target: KeyTarget) -> str | None:
        """Why ``target``'s failed connection is ssh refusing the pinned key, or ``None``.

        Asks the host for the key it serves (one scan, made only for a host whose play failed):
        the answer names the failure and is never recorded.
        """
        rec = self._load().get(target.instance_id)
        if not rec or rec["address"] != target.address or int(rec["port"]) != target.port:
            return None
        # One try, so a generous timeout: on a loaded machine a key exchange can take seconds.
        served = self._scanner(target.address, target.port, MISMATCH_SCAN_TIMEOUT)
        if not served or set(served) & set(rec["keys"]):
            return None
        how = "published on its console" if rec.get("origin") == "published" else "recorded at first contact"
        return (
            f"the SSH host key served at {host_pattern(target.address, target.port)} is not the one instance "
            f"{target.instance_id} {how} (pinned in {self.known_hosts}); not trusting it"
        )

    def forget(self, instance_ids: Iterable[str]) -> None:
        """Drop the keys of instances that are gone (terminated)."""
        with self._lock:
            index = self._load()
            for iid in instance_ids:
                index.pop(iid, None)
            self._save(index)

    @staticmethod
    def _published_until(target: KeyTarget, source: KeySource, deadline: float) -> list[str] | str | None:
        """The keys ``target`` published; a one-line refusal; ``None`` when nothing came by ``deadline``."""
        while True:
            try:
                published = source.read(target)
                keys = None if published is None else _checked(target, published)
            except PublishedKeyError as exc:
                return f"published SSH host key of instance {target.instance_id} refused: {exc}"
            except OSError:
                keys = None  # the console could not be read this time: as if nothing were there yet
            if keys is not None or time.monotonic() >= deadline:
                return keys
            time.sleep(0.25)

    def _scan_until(self, target: KeyTarget, deadline: float) -> list[str]:
        while True:
            keys = self._scanner(target.address, target.port, 2.0)
            if keys or time.monotonic() >= deadline:
                return keys
            time.sleep(0.5)


def _checked(target: KeyTarget, published: Published) -> list[str] | None:
    """The keys of ``published`` if it is ``target``'s own (``PublishedKeyError`` if not); ``None``: not yet."""
    if published.instance_id != target.instance_id:
        raise PublishedKeyError(f"the cloud reported the console of instance {published.instance_id[:80]!a}")
    if published.address != target.address:
        raise PublishedKeyError(
            f"the console was published for address {published.address[:80]!a}, not {target.address}"
        )
    return published_keys(published.console)
