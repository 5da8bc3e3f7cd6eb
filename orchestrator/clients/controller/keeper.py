"""The lease keeper: lease renewals in a child process, the gate in the orchestrator's process.

Why a process: renewals must not be delayed by anything the orchestrator does. Terraform runs in
a worker process already, but the orchestrator's own Python work (ansible-runner's event
callbacks, JSON parsing of plans, reconcile loops) holds the GIL, and every step of a renewal
(wake up, build the message, write it, read the grant) needs the GIL too: with four CPU-bound
threads in the process, a renewal's round trip was measured at p99 ~0.6 s (``bench/bench_lease.py``).
The keeper child has nothing else to do, so its renewal thread and its link's I/O thread get a
CPU at once.

How it works:

- ``LeaseKeeper.start()`` spawns ``python -m orchestrator.clients.controller.keeper`` (spawn,
  never fork: the parent has threads) and sends it the controller settings and providers as one
  JSON line on its stdin. The child opens its own ``ControllerLink`` joined under the *same*
  instance id and process instance (``leaseInstance``) as its parent: the controller ties leases
  to the certificate identity and the process instance, not to a connection, so the two links are
  one holder and every other process is another (docs/protocol.md §5). The child runs a
  ``LeaseManager``.
- The child publishes every lease change into a small shared-memory file (one record per
  provider, written under a sequence lock by the child only): epoch, ``valid_until`` on
  ``CLOCK_MONOTONIC`` (system-wide on Linux, so both processes read the same clock), TTL, the
  holder or last error, and the due, sent and confirmed times of the last confirmed renewal
  (``LeaseKeeper.record``; ``bench/bench_lease.py`` measures renewal lateness from them).
- ``LeaseKeeper.gate(provider)`` reads the record and checks ``now < valid_until``: no message,
  no lock shared with the child. ``valid_until`` moves only when a renewal is *confirmed*
  (``renew_sent + TTL - margin``), so nothing that delays or stalls the child (a stuck or
  flooded link reader included) can keep the gate open: if the child dies or hangs, its last
  deadline still bounds the lease, and the gate closes on time by itself.
- The child's link is lease-only: it resyncs nothing and drops demand and host-event pushes
  unconverted, so a controller flooding pushes costs the renewals almost nothing.
- Revocation: the parent's link also receives ``leaseRevoked``; ``revoke()`` closes the gate in
  the parent at once and tells the child. The child's own link receives the push too.
- ``want(providers)`` tells the child which providers to ask for from now on (the daemons
  sharing a database split them): a JSON line ``want [...]``; the child's manager releases the
  dropped ones, gate closed first (``LeaseManager.want``). The shared file keeps a record for
  every configured provider, so the set can change without a new child.
- ``close(release=True)`` asks the child to release every lease and exit; stdin EOF (the
  orchestrator crashed) makes the child stop renewing *without* releasing: a crashed
  orchestrator may have left a Terraform worker running, so the lease must lapse by its TTL.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import mmap
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from orchestrator.clients.controller.lease import LeaseManager, LeaseRecord, LeaseStatus
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import Epoch
from orchestrator.errors import ControllerError, LeaseLost
from orchestrator.model.config import ControllerSettings
from orchestrator.protocol.holder import process_instance

log = logging.getLogger(__name__)

_MAGIC = b"XCELEAS2"
_HEADER = struct.Struct("<8sQ")  # magic, number of records
# generation, term, seq, valid_until, ttl, held, renewal due, sent, confirmed, note
_RECORD = struct.Struct("<QQQddQddd80s")
_NOT_HELD = LeaseRecord(None, -math.inf, 0.0)
_READ_RETRIES = 1000


class SharedLeases:
    """Lease records in a shared file: one writer (the keeper child), any number of readers.

    A sequence lock per record: the writer makes the generation odd, writes, makes it even; a
    reader retries while the generation is odd or changed under it, so it never sees a torn record.
    """

    def __init__(self, path: Path, providers: Sequence[str], create: bool = False) -> None:
        self.path = path
        self.providers = list(providers)
        self.index = {p: i for i, p in enumerate(self.providers)}
        size = _HEADER.size + _RECORD.size * len(self.providers)
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            os.ftruncate(fd, size)
        else:
            fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        if create:
            _HEADER.pack_into(self._map, 0, _MAGIC, len(self.providers))
            for provider in self.providers:
                self._pack(self.index[provider], 0, _NOT_HELD)
        magic, count = _HEADER.unpack_from(self._map, 0)
        if magic != _MAGIC or count != len(self.providers):
            raise ControllerError(f"lease keeper shared file {path} does not match")

    def _offset(self, i: int) -> int:
        return _HEADER.size + i * _RECORD.size

    def _pack(self, i: int, gen: int, r: LeaseRecord) -> None:
        term, seq = (r.epoch.term, r.epoch.seq) if r.epoch is not None else (0, 0)
        note = r.note.encode("utf-8", "replace")[:80]
        _RECORD.pack_into(
            self._map,
            self._offset(i),
            gen,
            term,
            seq,
            r.valid_until,
            r.ttl,
            1 if r.epoch is not None else 0,
            r.renewal_due,
            r.renewal_sent,
            r.renewal_confirmed,
            note,
        )

    def write(self, provider: str, record: LeaseRecord) -> None:
        """Publish one provider's lease (writer only)."""
        i = self.index[provider]
        off = self._offset(i)
        (gen,) = struct.unpack_from("<Q", self._map, off)
        struct.pack_into("<Q", self._map, off, gen + 1)  # odd: being written
        self._pack(i, gen + 1, record)
        struct.pack_into("<Q", self._map, off, gen + 2)  # even: consistent

    def read(self, provider: str) -> LeaseRecord:
        """One provider's lease record, consistent."""
        i = self.index[provider]
        off = self._offset(i)
        for _ in range(_READ_RETRIES):
            gen, term, seq, until, ttl, held, due, sent, confirmed, note = _RECORD.unpack_from(self._map, off)
            if gen % 2 == 0:
                (again,) = struct.unpack_from("<Q", self._map, off)
                if again == gen:
                    text = note.rstrip(b"\0").decode("utf-8", "replace")
                    return LeaseRecord(Epoch(term, seq) if held else None, until, ttl, text, due, sent, confirmed)
            time.sleep(0)
        raise LeaseLost(f"lease record of provider {provider!r} is being rewritten continuously")

    def close(self) -> None:
        """Unmap."""
        self._map.close()


class LeaseKeeper:
    """Holds the leases of ``providers`` from a child process; ``gate`` is read locally."""

    def __init__(
        self,
        settings: ControllerSettings,
        *,
        instance_id: str,
        providers: Sequence[str],
        cluster: str = "",
        margin: float | None = None,
        python: str | None = None,
        lease_instance: str | None = None,
        wanted: Sequence[str] | None = None,
    ) -> None:
        self.settings = settings
        self.instance_id = instance_id
        # This process's instance (the one its own link joins with), handed to the child.
        self.lease_instance = process_instance(instance_id) if lease_instance is None else lease_instance
        self.providers = sorted(providers)
        # The providers asked for (every one unless told otherwise): see want().
        self._wanted = sorted(self.providers if wanted is None else set(wanted) & set(self.providers))
        self.cluster = cluster
        self.margin = settings.lease_margin if margin is None else margin
        self.python = python or sys.executable
        self._dir: Path | None = None
        self._shared: SharedLeases | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stdin: IO[bytes] | None = None
        self._lock = threading.Lock()
        self._revoked: dict[str, Epoch] = {}

    def start(self) -> None:
        """Spawn the keeper child and hand it its configuration."""
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self._dir = Path(tempfile.mkdtemp(prefix="xceprov-leases-", dir=base))
        path = self._dir / "leases"
        self._shared = SharedLeases(path, self.providers, create=True)
        config = {
            "settings": self.settings.model_dump(mode="json"),
            "instance_id": self.instance_id,
            # The parent's process instance: the keeper's link and the parent's are one holder.
            "lease_instance": self.lease_instance,
            "providers": self.providers,
            "wanted": self._wanted,
            "cluster": self.cluster,
            "margin": self.margin,
            "shared": str(path),
        }
        self._proc = subprocess.Popen(
            [self.python, "-m", "orchestrator.clients.controller.keeper"],
            stdin=subprocess.PIPE,
            close_fds=True,
        )
        assert self._proc.stdin is not None
        self._stdin = self._proc.stdin
        self._command(json.dumps(config))

    def _command(self, line: str) -> None:
        with self._lock:
            if self._stdin is None:
                return
            try:
                self._stdin.write(line.encode() + b"\n")
                self._stdin.flush()
            except (BrokenPipeError, ValueError):
                log.warning("lease keeper is gone; leases lapse by their deadlines")

    def alive(self) -> bool:
        """Whether the keeper child is running."""
        return self._proc is not None and self._proc.poll() is None

    def gate(self, provider: str) -> Epoch:
        """The epoch to stamp on a mutation; ``LeaseLost`` when the lease is not valid right now."""
        if self._shared is None:
            raise LeaseLost("the lease keeper is not running")
        if provider not in self._shared.index:
            raise LeaseLost(f"no lease is managed for provider {provider!r}")
        record = self._shared.read(provider)
        epoch, until, note = record.epoch, record.valid_until, record.note
        now = time.monotonic()
        if epoch is None:
            raise LeaseLost(f"lease for provider {provider!r} is not held" + (f" ({note})" if note else ""))
        revoked = self._revoked.get(provider)
        if revoked is not None and epoch <= revoked:
            raise LeaseLost(f"lease for provider {provider!r} was revoked (epoch {epoch})")
        if now >= until:
            raise LeaseLost(f"lease for provider {provider!r} lapsed {now - until:.1f}s ago (epoch {epoch})")
        return epoch

    def valid(self, provider: str) -> bool:
        """Whether ``gate(provider)`` would pass right now."""
        try:
            self.gate(provider)
        except LeaseLost:
            return False
        return True

    def record(self, provider: str) -> LeaseRecord:
        """The provider's lease as the keeper child last published it (times on CLOCK_MONOTONIC)."""
        if self._shared is None or provider not in self._shared.index:
            return _NOT_HELD
        return self._shared.read(provider)

    def status(self) -> list[LeaseStatus]:
        """Every lease as published by the keeper."""
        if self._shared is None:
            return []
        now = time.monotonic()
        out = []
        for provider in self.providers:
            r = self._shared.read(provider)
            epoch, until, ttl, note = r.epoch, r.valid_until, r.ttl, r.note
            held = epoch is not None and now < until
            out.append(
                LeaseStatus(
                    provider,
                    held,
                    epoch,
                    ttl,
                    max(0.0, until - now) if epoch else 0.0,
                    self.instance_id if epoch is not None else note,
                    note if held else "",
                )
            )
        return out

    def revoke(self, provider: str, epoch: Epoch | None = None) -> None:
        """A revocation push seen by the orchestrator's link: close the gate now, tell the child."""
        target = epoch or self.record(provider).epoch
        if target is None:
            return
        self._revoked[provider] = max(target, self._revoked.get(provider, target))
        self._command(f"revoke {provider} {target.term} {target.seq}")

    def want(self, providers: Sequence[str]) -> None:
        """Ask for exactly ``providers`` (of those configured) from now on: the child releases the
        ones dropped (their gate closes first) and asks at once for the wanted ones not held. Call
        it only while no op of a dropped provider is in flight (the daemon calls it between passes)."""
        self._wanted = sorted(set(providers) & set(self.providers))
        self._command("want " + json.dumps(self._wanted))

    def wanted(self) -> set[str]:
        """The providers asked for."""
        return set(self._wanted)

    def attach(self, link: ControllerLink) -> None:
        """Let the orchestrator's own link close the gate on a revocation push at once."""
        link.on_lease_revoked(lambda r: self.revoke(r.provider, r.epoch))

    def close(self, release: bool = True) -> None:
        """Stop the child (releasing every lease on a clean shutdown) and remove the shared file."""
        proc = self._proc
        if proc is not None:
            self._command("release" if release else "stop")
            with self._lock:
                if self._stdin is not None:
                    with contextlib.suppress(OSError):
                        self._stdin.close()
                    self._stdin = None
            try:
                proc.wait(self.settings.request_timeout + 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            self._proc = None
        if self._shared is not None:
            self._shared.close()
            self._shared = None
        if self._dir is not None:
            with contextlib.suppress(OSError):
                (self._dir / "leases").unlink()
                self._dir.rmdir()
            self._dir = None


def _child(config: dict[str, Any]) -> int:
    """The keeper child: link + lease manager; publishes every change; obeys stdin commands."""
    settings = ControllerSettings.model_validate(config["settings"])
    providers: list[str] = list(config["providers"])
    shared = SharedLeases(Path(config["shared"]), providers)
    link = ControllerLink(
        settings,
        instance_id=config["instance_id"],
        providers=providers,
        cluster=config.get("cluster", ""),
        lease_only=True,
        lease_instance=str(config["lease_instance"]),
    )
    manager: LeaseManager | None = None

    def publish(provider: str) -> None:
        assert manager is not None
        shared.write(provider, manager.record(provider))

    manager = LeaseManager(
        link,
        providers,
        wanted=config.get("wanted"),
        margin=float(config["margin"]),
        holder_id=config["instance_id"],
        instance=str(config["lease_instance"]),
        clock=time.monotonic,
        on_change=publish,
        retry_interval=min(1.0, settings.request_timeout),
    )
    link.on_lease_revoked(lambda r: manager.revoke(r.provider, r.epoch) if manager else None)
    link.on_reconnect(lambda _s: manager.kick(reacquire=True) if manager else None)
    link.start()
    manager.start()
    release = False
    try:
        for raw in sys.stdin:
            words = raw.split()
            if not words:
                continue
            if words[0] == "revoke" and len(words) == 4:
                manager.revoke(words[1], Epoch(int(words[2]), int(words[3])))
            elif words[0] == "want":
                manager.want(json.loads(raw.split(None, 1)[1]))
            elif words[0] in ("release", "stop"):
                release = words[0] == "release"
                break
    finally:
        manager.close(release=release)
        for provider in providers:
            publish(provider)
        link.close()
        shared.close()
    return 0


def main() -> int:
    """Entry of ``python -m orchestrator.clients.controller.keeper`` (configuration on stdin)."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s lease-keeper: %(message)s")
    # A Ctrl-C in the terminal of a daemon run by hand reaches the whole process group: the
    # keeper must not die of it before the daemon has parked its work and asked for the release.
    # It ends by its parent's word on stdin (or stdin's end when the parent is gone).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    first = sys.stdin.readline()
    if not first:
        return 0
    return _child(json.loads(first))


if __name__ == "__main__":
    sys.exit(main())
