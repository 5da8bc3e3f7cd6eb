"""A provider's instances over several working directories (states) of bounded size.

Terraform core rewrites the whole state after every resource instance it applies, so one
apply of N instances in one state costs O(N²) (docs/performance.md, "Bursts that scale").
A provider's instances are therefore spread over *shards*: working directories of at most
``providers.<name>.shard_size`` instances each, every one with its own Terraform state, lock and
desired set, applied independently (in parallel, under the provider's one lease).

Layout (docs/architecture.md, "Bursts that scale")::

    <state_dir>/work/<cluster>/<provider>/             shard 0 (the single-directory layout as it was)
    <state_dir>/work/<cluster>/<provider>/shards/<n>/  shard n >= 1

Shard 0 *is* the provider's former working directory: an existing ``<provider>/`` with its state
and desired set is used untouched, keeps its lock (``<provider>.lock``) and holds its instances
for as long as they live. Terraform reads only the ``*.tf`` files of a working directory itself,
so the ``shards/`` subdirectory is invisible to shard 0's Terraform.

Placement: the desired sets are the durable record of which shard holds which key. A key
written into a shard's desired set stays in that shard until it is removed (instances never move
between states). :meth:`ProviderShards.place` keeps every key already held where it is and
gives the others, in order, to the least-full shard with room (ties: lowest index), opening a
new shard when none has room; an op larger than the free room spans shards. It is a function of
what is on disk only, so a resumed op gets the same shards for every key that could have reached
Terraform (a key reaches Terraform only through a desired set), and a second call before anything
was written answers the same. Callers hold :meth:`ProviderShards.placement_lock` from placing
until the desired sets are written, so two placements never read the same free room.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock

from orchestrator import durable
from orchestrator.model.config import Config
from orchestrator.model.images import ImageSpec
from orchestrator.model.instances import InstanceSpec
from orchestrator.workspace.desired import DESIRED, DesiredSet
from orchestrator.workspace.documents import SHARDS, ProviderDocuments
from orchestrator.workspace.workdir import ProviderWorkdir

# The module setting that leaves the cluster's tagged listing out of a state (docs/provider-modules.md).
LIST_TAGGED = "list_tagged"
_INDEX = re.compile(r"^[1-9][0-9]{0,5}$")


def listing_dir(workdir: Path) -> Path:
    """The working directory whose ``tagged`` output lists the cloud for ``workdir``'s provider.

    ``<provider>/shards/<n>`` → ``<provider>`` (shard 0, the listing shard); shard 0 itself (or
    any directory not laid out as a shard) → itself.
    """
    workdir = Path(workdir)
    if workdir.parent.name == SHARDS and _INDEX.match(workdir.name):
        return workdir.parent.parent
    return workdir


class ShardWorkdir(ProviderWorkdir):
    """One shard of a provider: a whole Terraform working directory (state, desired set, lock).

    Shard 0 has exactly the path, desired set and lock of :class:`ProviderWorkdir`, so code that
    still builds a ``ProviderWorkdir`` works on shard 0 and the two serialise on the same lock.
    """

    def __init__(
        self, config: Config, provider: str, toolkit_root: Path, index: int, documents: ProviderDocuments | None = None
    ) -> None:
        super().__init__(config, provider, toolkit_root, documents)
        if index < 0:
            raise ValueError(f"shard index must be >= 0, not {index}")
        self.index = index
        self.base = self.path  # <state_dir>/work/<cluster>/<provider>: shard 0
        if index > 0:
            self.path = self.base / SHARDS / str(index)
            self.desired = DesiredSet(self.path / DESIRED, self.documents.desired(index), self.labels)
            self.suspects = self.documents.suspects(index)

    def parent_dir(self) -> Path:
        """The directory holding this shard (and its lock and staging copies), private, created."""
        if self.index == 0:
            return super().parent_dir()
        return durable.private_tree(self.config.state_dir, "work", self.config.cluster, self.provider, SHARDS)

    def variables(
        self,
        instances: Mapping[str, InstanceSpec],
        settings: Mapping[str, Any],
        images: Mapping[str, ImageSpec] | None = None,
    ) -> dict[str, Any]:
        """The variables document; shards >= 1 leave the tagged listing out (``list_tagged`` false).

        The listing is by cluster tag, the same from every shard: read in every shard it would
        multiply the cloud's list calls and make each state carry the whole cluster
        (docs/performance.md), so only shard 0 (:meth:`ProviderShards.listing_shard`) reads it.
        """
        document = super().variables(instances, settings, images)
        if self.index > 0:
            document["settings"] = {**document["settings"], LIST_TAGGED: False}
        return document

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShardWorkdir) and other.path == self.path

    def __hash__(self) -> int:
        return hash(self.path)

    def __repr__(self) -> str:
        return f"ShardWorkdir({self.provider!r}, {self.index})"


@dataclass(frozen=True)
class _Seen:
    """A desired set's keys as read, valid while its file is the same file (atomic replaces) or,
    with the shared store, while its stored content is the same."""

    stamp: object
    keys: frozenset[str]


class ProviderShards:
    """The shards of one provider: listing, placement of an op's keys, and which shard holds a key."""

    def __init__(
        self, config: Config, provider: str, toolkit_root: Path, documents: ProviderDocuments | None = None
    ) -> None:
        self.config = config
        self.provider = provider
        self.toolkit_root = toolkit_root
        # ProviderWorkdir checks the provider and its module; shard 0 is made eagerly for that.
        self._shards: dict[int, ShardWorkdir] = {0: ShardWorkdir(config, provider, toolkit_root, 0, documents)}
        self.documents = self._shards[0].documents
        self._seen: dict[int, _Seen] = {}

    @property
    def shard_size(self) -> int:
        """At most this many instances are placed in one shard (``providers.<name>.shard_size``)."""
        return self.config.providers[self.provider].shard_size

    @property
    def base(self) -> Path:
        """``<state_dir>/work/<cluster>/<provider>``: shard 0, and the parent of ``shards/``."""
        return self._shards[0].path

    def shard(self, index: int) -> ShardWorkdir:
        """Shard ``index`` (the same object every time; it need not exist on disk yet)."""
        if index not in self._shards:
            self._shards[index] = ShardWorkdir(self.config, self.provider, self.toolkit_root, index, self.documents)
        return self._shards[index]

    def all(self) -> list[ProviderWorkdir]:
        """Every shard: shard 0 always, then each ``shards/<n>/`` on disk, by index.

        With the shared store, also every shard whose desired set the store holds: a working
        directory is a cache there, and one deleted (or never made on this machine) is rebuilt.
        """
        indices = {0}
        with contextlib.suppress(FileNotFoundError):  # no shard beyond 0 was ever opened
            indices.update(int(p.name) for p in (self.base / SHARDS).iterdir() if _INDEX.match(p.name) and p.is_dir())
        stored = self.documents.stored_desired()
        if stored is not None:
            indices.update(stored)
        return [self.shard(i) for i in sorted(indices)]

    def listing_shard(self) -> ProviderWorkdir:
        """The shard whose ``tagged`` output is the provider's cloud listing: shard 0.

        The listing is by cluster tag, the same from every shard, so it is read once per
        provider (docs/architecture.md, "Bursts that scale"), from the shard that always exists.
        """
        return self._shards[0]

    def placement_lock(self, timeout: float = 600.0) -> FileLock:
        """Held from :meth:`place` until the desired sets are written: one placement at a time.

        A separate lock from the shards' own, so a placement does not wait for applies of
        shards it does not touch; the shard locks are taken as usual to write and apply.
        """
        self._shards[0].parent_dir()
        return FileLock(str(self.base) + ".placement.lock", timeout=timeout, mode=durable.PRIVATE_FILE)

    def keys(self, shard: ProviderWorkdir) -> frozenset[str]:
        """The instance keys in ``shard``'s desired set (parsed again only when it changed)."""
        index = shard.index if isinstance(shard, ShardWorkdir) else 0
        if self.documents.shared:
            return self._keys(shard, index, shard.desired.record.read())
        try:
            info = os.stat(shard.desired_file)
            stamp: tuple[int, int, int] | None = (info.st_ino, info.st_mtime_ns, info.st_size)
        except FileNotFoundError:
            stamp = None
        return self._keys(shard, index, stamp)

    def _keys(self, shard: ProviderWorkdir, index: int, stamp: object) -> frozenset[str]:
        """The keys as last parsed while ``stamp`` (the file's identity, or the stored content) holds."""
        seen = self._seen.get(index)
        if seen is None or seen.stamp != stamp:
            if isinstance(stamp, bytes):  # the stored content itself: parsed, not read again
                keys = frozenset(shard.desired.parse(stamp))
            else:
                keys = frozenset(shard.desired.read()) if stamp is not None else frozenset()
            seen = _Seen(stamp, keys)
            self._seen[index] = seen
        return seen.keys

    def held(self) -> dict[int, frozenset[str]]:
        """Every shard's keys, by index (with the shared store: every desired set in one read)."""
        stored = self.documents.stored_desired()
        if stored is None:
            return {s.index: self.keys(s) for s in self.all()}
        indices = sorted({0, *stored})
        return {i: self._keys(self.shard(i), i, stored.get(i)) for i in indices}

    def holding(self, key: str) -> ProviderWorkdir | None:
        """The shard whose desired set holds ``key``, or None when no shard does."""
        for index, keys in self.held().items():
            if key in keys:
                return self.shard(index)
        return None

    def place(self, op_id: str, keys: list[str]) -> dict[ProviderWorkdir, list[str]]:
        """Which shard each of ``keys`` (instance keys of op ``op_id``) goes to, in the given order.

        Keys already in a desired set stay there. The others go to the least-full shard with
        room, then the next, and to new shards when every shard is full; no shard is given more
        than ``shard_size`` keys (a shard 0 that was fuller before sharding existed only gets
        none). Nothing is written: the caller writes the desired sets under
        :meth:`placement_lock`. Shards in the answer appear by index.
        """
        if len(set(keys)) != len(keys):
            raise ValueError(f"op {op_id}: duplicate instance keys")
        held = self.held()
        counts = {index: len(k) for index, k in held.items()}
        where: dict[int, list[str]] = {}
        todo: list[str] = []
        for key in keys:
            holder = next((index for index, k in held.items() if key in k), None)
            if holder is None:
                todo.append(key)
            else:
                where.setdefault(holder, []).append(key)
        while todo:
            room = {index: self.shard_size - count for index, count in counts.items() if count < self.shard_size}
            if room:
                # Least full first; on a tie the lowest index, so the answer never depends on dict order.
                target = min(room, key=lambda index: (-room[index], index))
            else:
                target = max(counts) + 1
                counts[target], room[target] = 0, self.shard_size
            taken, todo = todo[: room[target]], todo[room[target] :]
            where.setdefault(target, []).extend(taken)
            counts[target] += len(taken)
        return {self.shard(index): where[index] for index in sorted(where)}
