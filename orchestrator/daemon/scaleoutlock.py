"""The shared store's scale-out lock: one daemon of a database decides a scale-out at a time.

A PostgreSQL session-level advisory lock (``ProviderLocks`` of the shared store, under a name no
provider can have) on a connection of its own, opened at the first pass and kept: a daemon killed
while it holds the lock loses the connection, and the server frees the lock with it. Why the pass
needs it: ``orchestrator/reconcile/deciding.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from orchestrator.model.config import Config
from orchestrator.reconcile.deciding import ScaleOutLock
from orchestrator.workspace.pgsite import PgSite, pg_site

if TYPE_CHECKING:
    from orchestrator.clients.postgres import ProviderLocks

# Provider names match model.config.NAME_PATTERN (lower case first): this one is never a provider's.
SCALE_OUT: Final = "*scale-out"


class SharedScaleOutLock:
    """:class:`~orchestrator.reconcile.deciding.ScaleOutLock` over the shared store."""

    def __init__(self, site: PgSite) -> None:
        self._site = site
        self._locks: ProviderLocks | None = None

    def try_acquire(self) -> bool:
        """Take the lock without waiting; ``StoreUnavailable`` when the store does not answer."""
        if self._locks is None:
            self._locks = self._site.provider_locks()
        return self._locks.try_lock(SCALE_OUT)

    def release(self) -> None:
        """Let it go (a lost connection has already)."""
        if self._locks is not None:
            self._locks.unlock(SCALE_OUT)

    def close(self) -> None:
        """Close its connection."""
        if self._locks is not None:
            self._locks.close()
            self._locks = None


def scale_out_lock(config: Config) -> ScaleOutLock | None:
    """The shared store's scale-out lock with ``terraform.backend: pg``; None with ``local``."""
    site = pg_site(config)
    return None if site is None else SharedScaleOutLock(site)
