"""The documents half of ``xceprov terraform migrate-state``: the local state files into the shared store.

With ``terraform.backend: pg`` the store is the record of the desired sets, the host-loss
suspects, the breakers, the bootstrap records and the orphan action limits
(docs/architecture.md, "State layout"); a site that switches from ``local`` has them as files.
Each file is copied into its row when the store has none yet: a second run copies nothing, and
a row the store already holds (another orchestrator's, or a run before) is never overwritten.
The files stay where they were; with ``pg`` nothing reads them any more (the desired sets' files
become the caches of their rows). The copy is not fenced by an epoch: migrate-state runs with
no other holder of the providers (``services/migrate_state.py`` refuses one first).
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.model.config import Config
from orchestrator.orphans.limits import ACTIONS_FILE
from orchestrator.reconcile.bootstraps import BOOTSTRAP_FILE
from orchestrator.reconcile.breaker import BREAKERS_FILE
from orchestrator.workspace.documents import Document, LocalDocuments, local_provider_documents
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.shareddocs import no_epoch
from orchestrator.workspace.sharedstore import cluster_documents, provider_documents

CLUSTER_FILES = (BREAKERS_FILE, BOOTSTRAP_FILE, ACTIONS_FILE)


def local_documents(config: Config, toolkit_root: Path) -> list[tuple[Document, Document]]:
    """(local file, its row in the store) for every state file of the local layout on disk."""
    pairs: list[tuple[Document, Document]] = []
    for provider in sorted(config.providers):
        base = config.state_dir / "work" / config.cluster / provider
        local = local_provider_documents(base)
        shared = provider_documents(config, provider, no_epoch)
        for shard in ProviderShards(config, provider, toolkit_root, local).all():
            pairs += [
                (local.desired(shard.index), shared.desired(shard.index)),
                (local.suspects(shard.index), shared.suspects(shard.index)),
            ]
    files, rows = LocalDocuments(config.state_dir), cluster_documents(config)
    pairs += [(Document(files, name), Document(rows, name)) for name in CLUSTER_FILES]
    return pairs


def migrate_documents(config: Config, toolkit_root: Path) -> list[str]:
    """Copy every local state file into the store where the store has no row yet; the rows
    written, named as messages name them."""
    copied: list[str] = []
    for local, shared in local_documents(config, toolkit_root):
        body = local.read()
        if body is None or shared.read() is not None:
            continue
        shared.write(body)
        copied.append(str(shared))
    return copied
