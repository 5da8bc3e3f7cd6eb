"""The fence every cloud mutation passes: the provider's lease, or the standalone lock.

A fence answers one question right before each cloud call or fact commit: "may I change this
provider now, and under which epoch?". Two kinds:

- the lease (``LeaseManager`` in-process or ``LeaseKeeper`` in a child process: both have
  ``gate`` and ``valid``); the epoch is the lease's ``(term, seq)``;
- standalone mode (``standalone: true`` in the configuration, no controller at all): a lock
  per provider held for the whole command, epoch :data:`STANDALONE_EPOCH`, tag ``none``: a local
  lock file (:class:`StandaloneFence`), or with ``terraform.backend: pg`` a lease row per
  provider in the shared store, renewed, with an expiry and a grace (:class:`LeasedFence`,
  ``standalone.py``), so standalone commands on several machines exclude each other, also
  across a restart of the database, and none runs beside a daemon of the cluster.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from filelock import FileLock, Timeout

from orchestrator import durable
from orchestrator.errors import LeaseHeld, LeaseLost
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.facts import Epoch
from orchestrator.ops.standalone import STANDALONE_EPOCH, STANDALONE_TTL, LeasedFence
from orchestrator.workspace.pgsite import pg_site

if TYPE_CHECKING:  # the type only: the store is opened by orchestrator.workspace.pgsite
    from orchestrator.clients.postgres import StandaloneLeases

__all__ = ["STANDALONE_EPOCH", "Fence", "LeasedFence", "ReadOnlyFence", "StandaloneFence", "epoch_tag"]

# The bound of one call of the standalone lease's own connection: a hung call must end well
# within a renewal period (TTL/3), so that the next try comes before the gate closes.
LEASE_STATEMENT_TIMEOUT: Final = STANDALONE_TTL / 10.0


class Fence(Protocol):
    """What the executor needs from a lease (``LeaseManager`` and ``LeaseKeeper`` fit as they are)."""

    def gate(self, provider: str) -> Epoch:
        """The epoch to stamp on a mutation of ``provider``; ``LeaseLost`` when not allowed now."""
        ...

    def valid(self, provider: str) -> bool:
        """Whether ``gate(provider)`` would pass right now (polled while Terraform runs)."""
        ...


def epoch_tag(epoch: Epoch) -> str:
    """The ``xce:epoch`` tag of a mutation made under ``epoch`` (``none`` when standalone)."""
    return owner.NO_EPOCH if epoch == STANDALONE_EPOCH else epoch.tag()


class StandaloneFence:
    """Local locks, one per provider, held until :meth:`close`; ``gate`` passes while held."""

    def __init__(self, lock_dir: Path, providers: Iterable[str]) -> None:
        self.lock_dir = lock_dir
        self.providers = sorted(providers)
        self._locks: dict[str, FileLock] = {}

    def acquire(self) -> StandaloneFence:
        """Take every provider's lock without waiting; ``LeaseHeld`` names the process holding one."""
        durable.private_dir(self.lock_dir)
        for provider in self.providers:
            path = self.lock_dir / f"standalone-{provider}.lock"
            # Held by the process, not a thread: the shards of one op are applied from worker
            # threads, and each gates on this lock (filelock's default is per thread).
            lock = FileLock(str(path), timeout=0, mode=durable.PRIVATE_FILE, thread_local=False)
            try:
                lock.acquire()
            except Timeout:
                self.close()
                holder = _holder(path.with_suffix(".pid"))
                raise LeaseHeld(
                    f"provider {provider}: the standalone lock {path} is held by {holder}; "
                    "retry when that command has finished",
                    holder=holder,
                ) from None
            path.with_suffix(".pid").write_text(f"{os.getpid()}\n")
            self._locks[provider] = lock
        return self

    def gate(self, provider: str) -> Epoch:
        """:data:`STANDALONE_EPOCH` while this process holds the provider's lock."""
        lock = self._locks.get(provider)
        if lock is None or not lock.is_locked:
            raise LeaseLost(f"provider {provider!r}: the standalone lock is not held by this process")
        return STANDALONE_EPOCH

    def valid(self, provider: str) -> bool:
        """Whether the provider's lock is held."""
        lock = self._locks.get(provider)
        return lock is not None and lock.is_locked

    def close(self) -> None:
        """Release every lock."""
        for provider, lock in self._locks.items():
            with contextlib.suppress(OSError):
                (self.lock_dir / f"standalone-{provider}.pid").unlink()
            lock.release()
        self._locks.clear()

    def __enter__(self) -> StandaloneFence:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.close()


def standalone_fence(config: Config, providers: Iterable[str]) -> StandaloneFence | LeasedFence:
    """The fence of a standalone command (not yet acquired): the shared store's lease rows with
    ``terraform.backend: pg`` (the gate closing ``controller.lease_margin`` before the row's
    expiry, as the controller's lease does), else local lock files under ``<state_dir>/locks``."""
    rows = lease_rows(config)
    if rows is None:
        return StandaloneFence(config.state_dir / "locks", providers)
    return LeasedFence(rows, providers, margin=float(config.controller.lease_margin))


def lease_rows(config: Config) -> StandaloneLeases | None:
    """The shared store's standalone lease rows with ``terraform.backend: pg`` (a connection of
    their own, opened at the first call); None with ``local``."""
    site = pg_site(config)
    if site is None:
        return None
    return site.standalone_leases(connect_timeout=LEASE_STATEMENT_TIMEOUT, statement_timeout=LEASE_STATEMENT_TIMEOUT)


def _holder(pid_file: Path) -> str:
    try:
        return f"process {pid_file.read_text().strip()}"
    except OSError:
        return "another process"


class ReadOnlyFence:
    """A dry run's fence: nothing may change, so every gate is closed."""

    def gate(self, provider: str) -> Epoch:
        """Always ``LeaseLost``: a dry run never mutates."""
        raise LeaseLost(f"provider {provider!r}: a dry run changes nothing")

    def valid(self, provider: str) -> bool:
        """Never."""
        return False
