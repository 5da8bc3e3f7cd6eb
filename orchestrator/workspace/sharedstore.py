"""Which documents a process uses: the shared store's with ``terraform.backend: pg``, else files.

:func:`store_for` opens the cluster's :class:`~orchestrator.clients.postgres.SharedStore` once
per process (per cluster and connection string) and keeps it; None with the local backend.
:func:`provider_documents` and :func:`cluster_documents` give the documents seam
(:mod:`.documents`) of one provider's shards and of the cluster's own state, in either place
(docs/architecture.md, "State layout").
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.model.config import Config
from orchestrator.workspace.documents import Documents, LocalDocuments, ProviderDocuments, local_provider_documents
from orchestrator.workspace.pgsite import pg_site
from orchestrator.workspace.shareddocs import EpochSource, SharedDocuments, refused

if TYPE_CHECKING:
    from orchestrator.clients.postgres import SharedStore

_opened: dict[tuple[str, str], SharedStore] = {}
_opening = threading.Lock()


def store_for(config: Config) -> SharedStore | None:
    """The cluster's shared store (opened on the first call of the process, then the same
    object); None with ``terraform.backend: local``. ``StoreUnavailable`` when it cannot be
    reached (the next call tries again)."""
    site = pg_site(config)
    if site is None:
        return None
    key = (site.cluster, site.conn_str)
    with _opening:
        store = _opened.get(key)
        if store is None:
            store = site.open_store()
            _opened[key] = store
        return store


def _opener(config: Config) -> Callable[[], SharedStore]:
    """The cluster's store, asked of :func:`store_for` at the first use and kept (the connection
    string is read once per user, not at every document)."""
    opened: list[SharedStore] = []

    def store() -> SharedStore:
        if not opened:
            found = store_for(config)
            assert found is not None, "the shared documents of a configuration without the pg backend"
            opened.append(found)
        return opened[0]

    return store


def shared(config: Config) -> bool:
    """Whether the configuration keeps its state in the shared store (``terraform.backend: pg``)."""
    return config.terraform.backend == "pg"


def provider_documents(config: Config, provider: str, epoch: EpochSource | None = None) -> ProviderDocuments:
    """The documents of ``provider``'s shards: files in its working directory (local), or the
    store's rows of the provider with writes fenced by ``epoch`` (default: refused, reads only)."""
    if not shared(config):
        return local_provider_documents(config.state_dir / "work" / config.cluster / provider)
    documents = SharedDocuments(
        _opener(config), config.cluster, provider, epoch if epoch is not None else refused(provider)
    )
    return ProviderDocuments(documents, documents.read_all)


def cluster_documents(config: Config, state_dir: Path | None = None) -> Documents:
    """The cluster's own documents (breakers, bootstrap records, orphan limits): files under
    ``state_dir`` (default: the configuration's; local), or the store's cluster-wide rows (not
    fenced: no provider's)."""
    if not shared(config):
        return LocalDocuments(state_dir if state_dir is not None else config.state_dir)
    return SharedDocuments(_opener(config), config.cluster, "")
