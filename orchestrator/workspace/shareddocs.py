"""The documents seam over the shared store (``terraform.backend: pg``): rows of one provider.

Each :class:`SharedDocuments` is the rows ``(cluster, provider, name)`` of the store's
``documents`` table (``orchestrator.clients.postgres``); provider ``""`` holds the cluster-wide
ones (breakers, bootstrap records, orphan action limits). A write or removal asks ``epoch`` for
the epoch to stamp on it right then: the provider's lease epoch (the executor's gate, so a
process whose fence is closed writes nothing), or None for cluster-wide documents. The store
refuses an epoch older than one it has seen for the provider (``LeaseLost``) and changes
nothing: a holder that lost the provider never overwrites its successor's state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from orchestrator.errors import LeaseLost
from orchestrator.model.facts import Epoch
from orchestrator.workspace.documents import Change

if TYPE_CHECKING:  # the type only: the store is opened by orchestrator.workspace.pgsite
    from orchestrator.clients.postgres import SharedStore

# The epoch a write is fenced by, asked right before the write (None: not fenced).
EpochSource = Callable[[], Epoch | None]


def no_epoch() -> Epoch | None:
    """Cluster-wide documents: no provider's epoch fences them."""
    return None


def refused(provider: str) -> EpochSource:
    """The epoch source of a provider's documents opened outside the executor: reads only."""

    def refuse() -> Epoch | None:
        raise LeaseLost(
            f"provider {provider}: its shared state changes only under its lease (or its standalone lock); "
            "nothing was written"
        )

    return refuse


class SharedDocuments:
    """The store's documents of ``provider`` (``""``: the cluster's), writes fenced by ``epoch``.

    ``store`` gives the cluster's store when a document is first read or written (so a command
    that never touches one never connects).
    """

    def __init__(
        self, store: Callable[[], SharedStore], cluster: str, provider: str, epoch: EpochSource = no_epoch
    ) -> None:
        self.store = store
        self.cluster = cluster
        self.provider = provider
        self.epoch = epoch

    def read(self, name: str) -> bytes | None:
        """The stored content; None when there is none."""
        return self.store().read_document(self.provider, name)

    def read_all(self, prefix: str) -> dict[str, bytes]:
        """Every document whose name starts with ``prefix`` (one round trip): name -> content."""
        return self.store().read_documents(self.provider, prefix)

    def write(self, name: str, body: bytes) -> None:
        """Store ``body``, fenced by the epoch asked of ``epoch`` now."""
        self.store().write_document(self.provider, name, body, self.epoch())

    def update(self, name: str, change: Change) -> bytes | None:
        """Replace the document with ``change(content now)`` in one transaction, in turn with
        every other update of it (``SharedStore.update_document``), fenced like a write."""
        return self.store().update_document(self.provider, name, change, self.epoch())

    def remove(self, name: str) -> None:
        """Remove the document (absent is fine), fenced like a write."""
        self.store().remove_document(self.provider, name, self.epoch())

    def where(self, name: str) -> str:
        """``shared store <cluster>/<provider>/<name>`` (``-`` for the cluster's own documents)."""
        return f"shared store {self.cluster}/{self.provider or '-'}/{name}"
