"""The orphan scan's inputs, all read in one pass: the cloud's views and the controller's.

Per provider, every shard's refresh-only plan (``cloudview.read_views``: drift, and from shard 0
the tagged listing); once per scan, the controller's status (term, when it started), its hosts
and each provider's facts. Nothing here decides anything: a read that fails is recorded as
*unread* with its one-line reason, and the guards refuse every automatic action that would
rest on it (docs/orphans-json.md, "Guards").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import ControllerStatus, HostInfo
from orchestrator.errors import XceprovError
from orchestrator.model.facts import Fact
from orchestrator.ops.executor import Wired, shard_index
from orchestrator.workspace.cloudview import Drift, Listing, read_drift_stream, read_views
from orchestrator.workspace.workdir import ProviderWorkdir


class ScanController(Protocol):
    """What the scan reads from the controller (``LinkController`` adapts the controller link)."""

    def connected(self) -> bool:
        """Whether the controller can be asked right now."""
        ...

    def status(self) -> ControllerStatus:
        """The controller's status (its term and when the term started); raises when unreadable."""
        ...

    def hosts(self) -> Sequence[HostInfo]:
        """Every host the controller knows; raises when unreadable."""
        ...

    def facts(self, provider: str) -> list[Fact]:
        """Every fact of ``provider``, oldest first; raises when unreadable."""
        ...


class LinkController:
    """:class:`ScanController` over an open controller link."""

    def __init__(self, link: ControllerLink) -> None:
        self.link = link

    def connected(self) -> bool:
        """The link's own view of its connection."""
        return self.link.state().connected

    def status(self) -> ControllerStatus:
        """``queryStatus``."""
        return self.link.query_status()

    def hosts(self) -> Sequence[HostInfo]:
        """``hostStatus`` of every provider."""
        return self.link.host_status()

    def facts(self, provider: str) -> list[Fact]:
        """``queryFacts`` (all pages), oldest first."""
        return sorted(self.link.query_facts(provider), key=lambda f: f.fact_id)


def first_line(exc: BaseException) -> str:
    """The first line of an error (what the report and the audit log carry)."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]


@dataclass
class ControllerRead:
    """The controller's view as read this pass; ``error`` set when any part could not be read."""

    status: ControllerStatus | None = None
    hosts: list[HostInfo] = field(default_factory=list)
    facts: dict[str, list[Fact]] = field(default_factory=dict)
    error: str = ""

    @property
    def complete(self) -> bool:
        """Status, hosts and every provider's facts were all read."""
        return not self.error and self.status is not None


def read_controller(controller: ScanController | None, providers: Sequence[str]) -> ControllerRead:
    """Status, hosts and facts in one go; the first failure stops the read (the view is unread)."""
    if controller is None:
        return ControllerRead(error="no controller (standalone): nothing says which hosts joined")
    out = ControllerRead()
    try:
        if not controller.connected():
            raise ConnectionError("controller unreachable (the link is not connected)")
        out.status = controller.status()
        out.hosts = list(controller.hosts())
        for provider in providers:
            out.facts[provider] = list(controller.facts(provider))
    except (XceprovError, OSError) as exc:
        out.error = first_line(exc)
    return out


@dataclass
class ShardRead:
    """One shard's refresh-only plan: its drift, and (shard 0) the provider's listing."""

    index: int
    workdir: ProviderWorkdir
    drift: Drift | None = None
    listing: Listing | None = None
    error: str = ""


@dataclass
class ProviderRead:
    """A provider's cloud views as read this pass."""

    provider: str
    shards: list[ShardRead] = field(default_factory=list)
    error: str = ""  # the provider's directories could not even be prepared

    @property
    def listing(self) -> Listing | None:
        """Shard 0's listing (None when unread)."""
        first = next((s for s in self.shards if s.index == 0), None)
        return first.listing if first is not None else None

    @property
    def drift_read(self) -> bool:
        """Every shard's drift was read."""
        return not self.error and bool(self.shards) and all(s.drift is not None for s in self.shards)

    @property
    def listing_read(self) -> bool:
        """Shard 0's listing was read (supported or not)."""
        return self.listing is not None

    def errors(self) -> list[str]:
        """Every read failure, one line each."""
        out = [self.error] if self.error else []
        return out + [f"shard {s.index}: {s.error}" for s in self.shards if s.error]


def read_shard(ops: Wired, shard: ProviderWorkdir) -> ShardRead:
    """One shard's views, read under its lock (no apply runs on it meanwhile): through the
    executor's reads and the engine of its parts."""
    executor, engine = ops.executor, ops.parts.engine
    out = ShardRead(shard_index(shard), shard)
    try:
        with shard.lock():
            if out.index == 0:
                executor.listable(shard)
                views = read_views(engine, shard.path, shard.labels)
                out.drift, out.listing = views.drift, views.listing
            else:
                # The listing is shard 0's: a drift-only read spares this shard the plan's show -json.
                out.drift = read_drift_stream(engine, shard.path, lambda: _state_ids(ops, shard))
    except (XceprovError, OSError) as exc:
        out.error = first_line(exc)
    return out


def _state_ids(ops: Wired, shard: ProviderWorkdir) -> dict[str, str]:
    """Instance key → cloud id in the shard's Terraform state (asked only when the drift deleted one)."""
    return {k: str(v.get("id", "")) for k, v in ops.executor.held(shard).items()}


def read_provider(ops: Wired, provider: str, reader: Callable[..., ShardRead] = read_shard) -> ProviderRead:
    """Every shard of ``provider``, at most ``terraform.parallel_states`` plans at a time."""
    out = ProviderRead(provider)
    try:
        shards = ops.executor.shards(provider)
    except (XceprovError, OSError) as exc:
        out.error = first_line(exc)
        return out
    workers = max(1, min(ops.parts.config.terraform.parallel_states, len(shards)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="xceprov-orphans") as pool:
        out.shards = list(pool.map(lambda shard: reader(ops, shard), shards))
    return out
