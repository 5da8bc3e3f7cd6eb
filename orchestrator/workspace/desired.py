"""The desired instance set of one provider's shard: its record, and the file Terraform reads.

The document is the complete Terraform variables document (every instance of the shard keyed
by instance key, the common tags, the module settings). It is the intent: it is written before
Terraform touches the cloud, so a crash mid-apply leaves a set that the next plan completes.
Every change replaces the record whole (atomically and durably, :mod:`.documents`); a refused
apply puts the previous content back the same way, never by rewriting it in place.

Where the record lives (:class:`~orchestrator.workspace.documents.Document`): with
``terraform.backend: local`` it *is* ``desired.tfvars.json`` in the working directory; with
``pg`` it is the shard's row of the shared store, and ``desired.tfvars.json`` is a cache of it,
written with every change and again from the record whenever the working directory is
prepared (:meth:`DesiredSet.refresh_cache`), so Terraform always reads the record's content.

The tags in the document are the module's cloud labels (``ProviderWorkdir.variables`` writes
them through the module's :class:`~orchestrator.model.labels.LabelMap`); :meth:`DesiredSet.read`
gives them back under the toolkit's keys through the same map.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from orchestrator import durable
from orchestrator.errors import FinalError
from orchestrator.model.images import ImageSpec
from orchestrator.model.instances import InstanceSpec
from orchestrator.model.labels import AS_IS, LabelMap
from orchestrator.workspace.documents import DESIRED, Document, json_body, local_document

__all__ = ["DESIRED", "DesiredSet", "Snapshot"]

# A record's write and its cache's write go together, and a refresh reads the record and writes
# the cache together: one at a time in this process, so a refresh never puts an older record's
# content over a newer cache (the shards of an op are written from worker threads).
_CACHE_LOCK = threading.Lock()
# An entry of the document whose ``tags`` are the cloud's labels (an instance, a baked image).
_Tagged = TypeVar("_Tagged", InstanceSpec, ImageSpec)


@dataclass(frozen=True)
class Snapshot:
    """The desired set as it was (``None``: there was none), for :meth:`DesiredSet.restore`."""

    content: bytes | None


class DesiredSet:
    """Reads and replaces one shard's desired set.

    ``path`` is the file Terraform reads (``<workdir>/desired.tfvars.json``); ``record`` is
    where the set is kept (default: that file itself, the local layout); ``labels``: the
    module's label map its tags are written with (default: tags as they are).
    """

    def __init__(self, path: Path, record: Document | None = None, labels: LabelMap | None = None) -> None:
        self.path = Path(path)
        self.labels = labels if labels is not None else AS_IS
        self.record = record if record is not None else local_document(self.path)
        # With a record elsewhere (the shared store) the file is only a cache of it.
        self.cached = record is not None and str(record) != str(self.path)

    def read(self) -> dict[str, InstanceSpec]:
        """The desired instances keyed by instance key (empty when nothing was ever applied)."""
        return self.parse(self.record.read())

    def parse(self, raw: bytes | None) -> dict[str, InstanceSpec]:
        """The desired instances of ``raw``, this set's content as read (None: none)."""
        return self._entries(raw, "instances", InstanceSpec, "unreadable desired set")

    def images(self) -> dict[str, ImageSpec]:
        """The desired baked images keyed by image key (only shard 0 holds any; docs/images.md)."""
        return self._entries(self.record.read(), "images", ImageSpec, "unreadable images of the desired set")

    def _entries(self, raw: bytes | None, member: str, model: type[_Tagged], what: str) -> dict[str, _Tagged]:
        """The entries of ``member`` in ``raw`` as ``model``s, their labels read back as tags."""
        try:
            if raw is None:
                return {}
            entries = durable.parse_json(raw).get(member) or {}
            specs = {str(key): model.model_validate(value) for key, value in entries.items()}
            if self.labels.identity:
                return specs
            back = self.labels.from_labels
            return {key: spec.model_copy(update={"tags": back(spec.tags)}) for key, spec in specs.items()}
        except (OSError, ValueError, AttributeError, ValidationError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise FinalError(f"{self.record}: {what}: {first}") from None

    def exists(self) -> bool:
        """Whether a desired set was ever written (an empty one counts)."""
        return self.record.read() is not None

    def write(self, variables: Mapping[str, Any]) -> None:
        """Replace the desired set with ``variables`` (atomic, durable, 0600); the cache follows."""
        body = json_body(dict(variables))
        with self._paired():
            self.record.write(body)
            self._cache(body)

    def snapshot(self) -> Snapshot:
        """The current content, to put back with :meth:`restore` if what follows is refused."""
        return Snapshot(self.record.read())

    def restore(self, snapshot: Snapshot) -> None:
        """Put a snapshot back atomically: readers see the refused set or the old one, never a mix."""
        with self._paired():
            if snapshot.content is None:
                self.record.remove()
            else:
                self.record.write(snapshot.content)
            self._cache(snapshot.content)

    def write_cache(self, variables: Mapping[str, Any]) -> None:
        """Write only the file Terraform reads (the record unchanged): what a read-only listing
        of a provider that has no desired set yet needs."""
        with self._paired():
            self._cache(json_body(dict(variables)))

    def refresh_cache(self) -> None:
        """Write the file Terraform reads from the record (a rebuilt working directory has none)."""
        if self.cached:
            with self._paired():
                self._cache(self.record.read())

    @contextlib.contextmanager
    def _paired(self) -> Iterator[None]:
        if not self.cached:
            yield
            return
        with _CACHE_LOCK:
            yield

    def _cache(self, body: bytes | None) -> None:
        if not self.cached:
            return
        if body is None:
            if self.path.parent.is_dir():
                durable.remove(self.path)
            return
        try:
            if self.path.read_bytes() == body:
                return
        except FileNotFoundError:
            pass
        durable.write_bytes_atomic(self.path, body)
