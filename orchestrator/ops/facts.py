"""Where facts go: the controller (through the link), or a journal in standalone mode.

The standalone journal is a local file (:class:`LocalFacts`), or with ``terraform.backend: pg``
the shared store's (:class:`SharedFacts`), so the next standalone command on any machine reads it.

Both are idempotent per ``(kind, op_id, instance_key)`` as the controller is, so a resumed op
that commits a fact again does not duplicate it. Both stamp a ``returned`` or ``lost`` fact's
``committed`` time when it has none, as the controller stamps every fact (the cost ledger's end
of an instance: docs/cost.md); other facts keep theirs as they were journaled (0: the callers
that read a created fact's time read it from the cloud). Both commit a batch of facts
(``commit_many``) in one durable write: one ``commitFacts`` round trip per chunk at the controller, one append
and one fsync in the journal; a burst's per-fact costs were most of its overhead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from orchestrator import durable
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.errors import FinalError
from orchestrator.model.config import Config
from orchestrator.model.facts import GONE_KINDS, Epoch, Fact, FactKind
from orchestrator.protocol.schema import MAX_BATCH_FACTS
from orchestrator.workspace.sharedstore import store_for

if TYPE_CHECKING:  # the type only: the store is opened by orchestrator.workspace.pgsite
    from orchestrator.clients.postgres import SharedStore


class FactLog(Protocol):
    """Commits facts and lists a provider's facts."""

    def commit(self, fact: Fact) -> None:
        """Commit ``fact`` durably (``LeaseLost`` when the controller refuses its epoch)."""
        ...

    def commit_many(self, facts: Sequence[Fact]) -> None:
        """Commit ``facts`` durably in as few writes as the log allows, in order.

        Batches are all or nothing: after a crash or a refusal (``LeaseLost``) each batch is
        committed whole or not at all, so a resumed op commits the missing ones again.
        """
        ...

    def facts(self, provider: str) -> list[Fact]:
        """Every fact of ``provider``, oldest first."""
        ...


# What one fact costs in a frame beyond its text (pointers, scalars, the list's words): far more
# than the encoding needs, so a chunk never comes near the frame limit.
_FACT_OVERHEAD_BYTES = 256


def chunks(facts: Sequence[Fact], max_count: int, max_bytes: int) -> Iterator[list[Fact]]:
    """``facts`` in order, in chunks of at most ``max_count`` facts and about ``max_bytes``."""
    chunk: list[Fact] = []
    size = 0
    for fact in facts:
        cost = _FACT_OVERHEAD_BYTES + sum(len(v.encode()) for v in dataclasses.astuple(fact) if isinstance(v, str))
        if chunk and (len(chunk) >= max_count or size + cost > max_bytes):
            yield chunk
            chunk, size = [], 0
        chunk.append(fact)
        size += cost
    if chunk:
        yield chunk


class LinkFacts:
    """Facts at the controller, over the controller link."""

    def __init__(self, link: ControllerLink) -> None:
        self.link = link

    def commit(self, fact: Fact) -> None:
        """``commitFact``."""
        self.link.commit_fact(fact)

    def commit_many(self, facts: Sequence[Fact]) -> None:
        """One ``commitFacts`` round trip per chunk of at most ``MAX_BATCH_FACTS`` facts (and
        a quarter of the frame limit, so that the reply, which adds the controller's fields,
        fits as well)."""
        for chunk in chunks(facts, MAX_BATCH_FACTS, self.link.settings.max_frame_bytes // 4):
            self.link.commit_facts(chunk)

    def facts(self, provider: str) -> list[Fact]:
        """``queryFacts`` (all pages)."""
        return sorted(self.link.query_facts(provider), key=lambda f: f.fact_id)


# A fact's identity in the journal, as at the controller: one record per kind, op and key.
_Identity = tuple[str, str, str]


def _identity(fact: Fact) -> _Identity:
    return (str(fact.kind), fact.op_id, fact.instance_key)


class LocalFacts:
    """Standalone mode: facts in a local JSON-lines journal (0600, fsync'd per batch).

    The journal is read once, then kept in memory (an index by identity) and only its new tail
    is read: before every read or write, under an exclusive ``flock`` of the journal, whatever
    another process appended since (standalone commands of other providers share the journal)
    is read, and a torn last line (a crash mid-write) is cut off before anything is appended
    after it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._known: list[Fact] = []
        self._ids: set[_Identity] = set()
        self._offset = 0  # bytes of the journal read into the index (whole lines only)
        self._lines = 0

    def _catch_up(self, fd: int) -> None:
        """Index the journal from ``_offset`` to its end (the ``flock`` is held)."""
        size = os.fstat(fd).st_size
        if size < self._offset:  # replaced or cut behind our back: read it again from the start
            self._known, self._ids, self._offset, self._lines = [], set(), 0, 0
        if size == self._offset:
            return
        data = os.pread(fd, size - self._offset, self._offset)
        lines = data.split(b"\n")
        torn = lines.pop() != b""  # no newline at the end: the last write was cut short
        good = self._offset
        for i, line in enumerate(lines):
            if line.strip():
                try:
                    fact = _decode(line)
                except (ValueError, KeyError, TypeError) as exc:
                    # A torn last line is the only expected damage; anything else is reported,
                    # never skipped silently.
                    if i == len(lines) - 1 and not torn:
                        torn = True
                        break
                    raise FinalError(f"{self.path}:{self._lines + 1}: unreadable fact: {exc}") from None
                self._known.append(fact)
                self._ids.add(_identity(fact))
            good += len(line) + 1
            self._lines += 1
        self._offset = good
        if torn:
            # The fragment is cut so that the next line starts on a line of its own.
            os.ftruncate(fd, good)
            os.fsync(fd)

    @contextlib.contextmanager
    def _journal(self, create: bool) -> Iterator[int | None]:
        """The journal's descriptor under the in-process lock and an exclusive ``flock``, read
        up to date; None when it does not exist and ``create`` is false."""
        with self._lock:
            if create:
                durable.private_dir(self.path.parent)
            existed = self.path.exists()
            try:
                flags = os.O_RDWR | (os.O_CREAT if create else 0)
                fd = os.open(self.path, flags, durable.PRIVATE_FILE)
            except FileNotFoundError:
                yield None
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if create and not existed:
                    durable.fsync_dir(self.path.parent)  # the new journal's name must survive a crash
                self._catch_up(fd)
                yield fd
            finally:
                os.close(fd)  # releases the flock

    def commit(self, fact: Fact) -> None:
        """Append ``fact`` unless the same kind, op and key is already there."""
        self.commit_many([fact])

    def commit_many(self, facts: Sequence[Fact]) -> None:
        """Append the facts not yet in the journal, in one write and one fsync."""
        with self._journal(create=True) as fd:
            assert fd is not None
            new: list[Fact] = []
            batch: set[_Identity] = set()
            for fact in facts:
                identity = _identity(fact)
                if identity in self._ids or identity in batch:
                    continue
                seq = len(self._known) + len(new) + 1
                new.append(dataclasses.replace(_stamped(fact), fact_id=seq))
                batch.add(identity)
            if not new:
                return
            data = b"".join(_encode(f) for f in new)
            self._append(fd, data, len(new))
            # Known only now that the lines are durable: a failed write leaves the index as it
            # was, so a retry writes them again.
            self._known.extend(new)
            self._ids |= batch
            self._offset += len(data)
            self._lines += len(new)

    def _append(self, fd: int, data: bytes, count: int) -> None:
        """Append ``data`` (``count`` whole lines) and fsync it, or leave the journal as it was.

        A write or fsync that fails (a full disk, an I/O error) is cut off again, so no part of
        the batch stays behind to be read as committed, and raises ``FinalError`` naming the
        journal: the batch is not committed and committing it again writes it.
        """
        start = os.lseek(fd, 0, os.SEEK_END)
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):  # the next catch-up cuts a torn tail off in any case
                os.ftruncate(fd, start)
                os.fsync(fd)
            raise FinalError(
                f"{self.path}: {count} fact(s) not recorded: {exc.strerror or exc}; "
                "nothing of the batch was kept, the op can be resumed once the journal can be written"
            ) from None

    def facts(self, provider: str) -> list[Fact]:
        """The journal's facts of ``provider``."""
        with self._journal(create=False):
            return [f for f in self._known if f.provider == provider]


def _to_json(fact: Fact) -> dict[str, Any]:
    value = dataclasses.asdict(fact)
    value["kind"] = str(fact.kind)
    value["epoch"] = [fact.epoch.term, fact.epoch.seq]
    return value


def _from_json(raw: dict[str, Any]) -> Fact:
    raw = dict(raw)
    raw["kind"] = FactKind(raw["kind"])
    raw["epoch"] = Epoch(*raw["epoch"])
    return Fact(**raw)


def _encode(fact: Fact) -> bytes:
    return (json.dumps(_to_json(fact), sort_keys=True) + "\n").encode()


def _decode(line: bytes) -> Fact:
    return _from_json(durable.parse_json(line))


class SharedFacts:
    """Standalone mode with ``terraform.backend: pg``: the fact journal in the shared store.

    The same contract as :class:`LocalFacts` (idempotent per kind, op and key; a batch is all or
    nothing) on the store's ``append_facts``/``facts_since``: the journal is read once, then only
    what was appended since (by any orchestrator of the cluster, on any machine). A fact's id is
    its number in the journal. Facts of one provider are appended only by the holder of its
    standalone lease (:class:`~orchestrator.ops.standalone.LeasedFence`), so the identity check never
    races another writer of the same facts.
    """

    def __init__(self, store: SharedStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._known: list[Fact] = []
        self._ids: set[_Identity] = set()
        self._seq = 0  # the last journal number read into the index

    def _catch_up(self) -> None:
        for seq, raw in self.store.facts_since(self._seq):
            try:
                fact = dataclasses.replace(_from_json(raw), fact_id=seq)
            except (ValueError, KeyError, TypeError) as exc:
                raise FinalError(f"shared store {self.store.cluster}: fact {seq}: unreadable: {exc}") from None
            self._known.append(fact)
            self._ids.add(_identity(fact))
            self._seq = seq

    def commit(self, fact: Fact) -> None:
        """Append ``fact`` unless the same kind, op and key is already there."""
        self.commit_many([fact])

    def commit_many(self, facts: Sequence[Fact]) -> None:
        """Append the facts not yet in the journal, as one batch (``StoreUnavailable``: none)."""
        with self._lock:
            self._catch_up()
            new: list[dict[str, Any]] = []
            batch: set[_Identity] = set()
            for fact in facts:
                identity = _identity(fact)
                if identity in self._ids or identity in batch:
                    continue
                new.append(_to_json(dataclasses.replace(_stamped(fact), fact_id=0)))
                batch.add(identity)
            if new:
                self.store.append_facts(new)
                self._catch_up()

    def facts(self, provider: str) -> list[Fact]:
        """The journal's facts of ``provider``, oldest first."""
        with self._lock:
            self._catch_up()
            return [f for f in self._known if f.provider == provider]


class NoFacts:
    """A dry run's fact log: reads nothing, refuses every commit."""

    def commit(self, fact: Fact) -> None:
        """Refused: a dry run records nothing."""
        raise FinalError(f"a dry run commits no facts (tried {fact.kind} of op {fact.op_id})")

    def commit_many(self, facts: Sequence[Fact]) -> None:
        """Refused: a dry run records nothing."""
        for fact in facts[:1]:
            self.commit(fact)

    def facts(self, provider: str) -> list[Fact]:
        """None."""
        return []


def _stamped(fact: Fact) -> Fact:
    """``fact`` with its commit time when it is a ``returned`` or ``lost`` fact without one."""
    if fact.kind in GONE_KINDS and not fact.committed:
        return dataclasses.replace(fact, committed=time.time())
    return fact


def standalone_facts(config: Config) -> LocalFacts | SharedFacts:
    """The standalone fact journal: the shared store's with ``terraform.backend: pg``, else the
    local file ``<state_dir>/facts/<cluster>.jsonl``."""
    store = store_for(config)
    if store is not None:
        return SharedFacts(store)
    return LocalFacts(config.state_dir / "facts" / f"{config.cluster}.jsonl")
