"""The seam between the toolkit's small state documents and where they are kept.

A successor needs the desired sets, the host-loss suspects, the breakers, the bootstrap records
and the orphan action limits to take over a provider (docs/architecture.md, "State layout").
Each is a small document read and replaced whole, through :class:`Documents`. A document that
several orchestrators (or a daemon and a command) write records into is changed only by
:meth:`Documents.update`, one step against every other update of it, so that no writer's records
are lost to another's older copy (docs/shared-store.md, "Records several orchestrators write"):

- :class:`LocalDocuments`: files under a root directory, as they always were (``backend: local``),
  replaced atomically and durably (:mod:`orchestrator.durable`), 0600;
- ``SharedDocuments`` (``orchestrator.workspace.shareddocs``): rows of the shared store
  (``terraform.backend: pg``), each write fenced by the provider's epoch.

A :class:`Document` is one named document of one :class:`Documents`; :class:`ProviderDocuments`
names the documents of a provider's shards in either place.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final, Protocol

from filelock import FileLock, Timeout

from orchestrator import durable
from orchestrator.errors import RetryableError

# The names of a shard's documents in the local layout, relative to the shard's working directory.
DESIRED = "desired.tfvars.json"
SUSPECTS = "lost-suspects.json"
# The subdirectory of a provider's working directory that holds shards >= 1 (workspace.shards).
SHARDS = "shards"
# How long an update waits for another process's update of the same local document (each holds
# its lock for one read and one write of a small file).
UPDATE_WAIT: Final = 60.0

# One change of a document: its content now (None: absent) -> its new content, or None to leave
# it as it is. Called while other updates of the document wait: short, no I/O of its own, and it
# may raise (nothing is written then).
Change = Callable[[bytes | None], bytes | None]


class Documents(Protocol):
    """Small documents read and replaced whole (a reader sees the old or the new one, never a mix)."""

    def read(self, name: str) -> bytes | None:
        """The document's content; None when there is none."""
        ...

    def write(self, name: str, body: bytes) -> None:
        """Replace the document durably (``LeaseLost`` when a fenced store refuses the epoch)."""
        ...

    def remove(self, name: str) -> None:
        """Remove the document (absent is fine), durably."""
        ...

    def update(self, name: str, change: Change) -> bytes | None:
        """Replace the document with ``change(content now)`` as one step against every other
        update of it, in this process or another (no update is lost); the content after."""
        ...

    def where(self, name: str) -> str:
        """How a message names the document (a path, or the store row)."""
        ...


def json_body(value: Any) -> bytes:
    """The bytes a JSON document is kept as (indented, sorted: the files as they always were)."""
    return json.dumps(value, indent=1, sort_keys=True).encode()


def _relative(name: str) -> PurePosixPath:
    """``name`` as a relative path that stays below the root (names are the toolkit's own)."""
    path = PurePosixPath(name)
    if path.is_absolute() or not path.parts or ".." in path.parts:
        raise ValueError(f"document name {name!r}: not a relative name below the root")
    return path


class LocalDocuments:
    """Files under ``root``: ``<root>/<name>``, replaced atomically and durably, 0600.

    Subdirectories a name implies are made private (0700) below ``root``; ``root`` itself is
    made as it always was (its parents with the default mode).
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, name: str) -> Path:
        """The file holding document ``name``."""
        return self.root.joinpath(*_relative(name).parts)

    def read(self, name: str) -> bytes | None:
        """The file's bytes; None when it does not exist."""
        try:
            return self.path(name).read_bytes()
        except FileNotFoundError:
            return None

    def write(self, name: str, body: bytes) -> None:
        """Replace the file atomically and durably (0600)."""
        self._parents(name)
        durable.write_bytes_atomic(self.path(name), body)

    def _parents(self, name: str) -> None:
        below = self.root
        for part in _relative(name).parts[:-1]:
            below = durable.private_dir(below / part)

    def update(self, name: str, change: Change) -> bytes | None:
        """Read, change and replace the file under an exclusive lock of ``<file>.lock`` (0600):
        another process's (or thread's) update of the same file waits, so neither overwrites
        what the other just wrote. ``RetryableError`` when the lock stays held for
        :data:`UPDATE_WAIT`."""
        self.root.mkdir(parents=True, exist_ok=True)  # as write() makes it: the default mode
        self._parents(name)
        path = self.path(name)
        try:
            with FileLock(f"{path}.lock", timeout=UPDATE_WAIT, mode=durable.PRIVATE_FILE):
                old = self.read(name)
                new = change(old)
                if new is None or new == old:
                    return old
                durable.write_bytes_atomic(path, new)
                return new
        except Timeout:
            raise RetryableError(
                f"{path}.lock: held by another process for over {UPDATE_WAIT:g} s; {name} not changed"
            ) from None

    def remove(self, name: str) -> None:
        """Unlink the file (absent is fine), durably."""
        path = self.path(name)
        if path.parent.is_dir():
            durable.remove(path)

    def where(self, name: str) -> str:
        """The file's path."""
        return str(self.path(name))


class SnapshotDocuments:
    """Documents as they were read once, held in memory: reads answer from the snapshot, writes
    are refused (what a status shows while the shared store is away)."""

    def __init__(self, contents: dict[str, bytes | None]) -> None:
        self.contents = dict(contents)

    def read(self, name: str) -> bytes | None:
        """The content as it was read."""
        return self.contents.get(name)

    def write(self, name: str, body: bytes) -> None:
        """Refused: a snapshot is never written back."""
        raise ValueError(f"{name}: a snapshot of a document is read-only")

    def remove(self, name: str) -> None:
        """Refused: a snapshot is never written back."""
        self.write(name, b"")

    def update(self, name: str, change: Change) -> bytes | None:
        """Refused: a snapshot is never written back."""
        self.write(name, b"")
        return None

    def where(self, name: str) -> str:
        """The name, marked as last read."""
        return f"{name} (as last read)"


@dataclass(frozen=True)
class Document:
    """One named document of a :class:`Documents`."""

    documents: Documents
    name: str

    def read(self) -> bytes | None:
        """The content; None when there is none."""
        return self.documents.read(self.name)

    def write(self, body: bytes) -> None:
        """Replace the content."""
        self.documents.write(self.name, body)

    def remove(self) -> None:
        """Remove the document (absent is fine)."""
        self.documents.remove(self.name)

    def update(self, change: Change) -> bytes | None:
        """Replace the content with ``change(content now)`` atomically (:meth:`Documents.update`)."""
        return self.documents.update(self.name, change)

    def __str__(self) -> str:
        return self.documents.where(self.name)


def local_document(path: Path) -> Document:
    """The file ``path`` as a document (the local layout of every state file)."""
    path = Path(path)
    return Document(LocalDocuments(path.parent), path.name)


# Every document of a provider whose name starts with a prefix: full name -> content.
ReadAll = Callable[[str], dict[str, bytes]]


class ProviderDocuments:
    """The documents of one provider's shards: where they live and how each is named.

    Local (no ``read_all``): files under the provider's working directory ``base``, shard 0's
    in ``base`` itself and shard n's in ``base/shards/<n>/`` (the layout as it always was).
    Shared (``read_all`` reads the store's rows by prefix): the store's rows of the provider,
    named ``desired/<n>`` and ``lost-suspects/<n>``.
    """

    def __init__(self, documents: Documents, read_all: ReadAll | None = None) -> None:
        self.documents = documents
        self.read_all = read_all

    @property
    def shared(self) -> bool:
        """Whether the documents are the shared store's (the working directories are caches)."""
        return self.read_all is not None

    def stored_desired(self) -> dict[int, bytes] | None:
        """Shared: every shard's stored desired set by index, in one read; local: None."""
        if self.read_all is None:
            return None
        out: dict[int, bytes] = {}
        for name, body in self.read_all("desired/").items():
            index = name.removeprefix("desired/")
            if index.isdigit():
                out[int(index)] = body
        return out

    def _name(self, index: int, local: str, shared: str) -> str:
        if self.shared:
            return f"{shared}/{index}"
        return local if index == 0 else f"{SHARDS}/{index}/{local}"

    def desired(self, index: int) -> Document:
        """Shard ``index``'s desired set."""
        return Document(self.documents, self._name(index, DESIRED, "desired"))

    def suspects(self, index: int) -> Document:
        """Shard ``index``'s host-loss suspects."""
        return Document(self.documents, self._name(index, SUSPECTS, "lost-suspects"))


def local_provider_documents(base: Path) -> ProviderDocuments:
    """The local layout of a provider whose shard 0 is the working directory ``base``."""
    return ProviderDocuments(LocalDocuments(base))
