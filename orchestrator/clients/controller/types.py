"""Plain typed values the controller link hands to the rest of the orchestrator.

They carry no Cap'n Proto objects: a pycapnp reader is only valid while its message is open, so
the link converts every reply and push into these frozen dataclasses on the reader thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.model.tags import format_epoch


@dataclass(frozen=True, order=True)
class Epoch:
    """A lease epoch ``(term, seq)``: the controller's durable HA term and a per-term sequence."""

    term: int
    seq: int

    def tag(self) -> str:
        """The owner-tag value of this epoch (``<term>.<seq>``)."""
        return format_epoch(self.term, self.seq)

    def __str__(self) -> str:
        return self.tag()


@dataclass(frozen=True)
class LeaseGrant:
    """The controller granted (or renewed) a provider's lease."""

    provider: str
    epoch: Epoch
    ttl: float


@dataclass(frozen=True)
class LeaseDenied:
    """Another instance holds the provider's lease (or the grace after a failover is running)."""

    provider: str
    holder: str
    retry_after: float


@dataclass(frozen=True)
class TemplateDemand:
    """Demand against supply of one host template, as the controller sees it."""

    template: str
    wanted: int
    in_flight: int = 0
    joined: int = 0
    idle: int = 0


@dataclass(frozen=True)
class DemandSnapshot:
    """A level-triggered demand push: the whole picture, numbered by ``seq``."""

    seq: int
    templates: tuple[TemplateDemand, ...] = ()


@dataclass(frozen=True)
class HostEvent:
    """A host joined, became idle (``idle_since`` in unix seconds) or was lost."""

    kind: str
    host_name: str
    instance_id: str = ""
    template: str = ""
    idle_since: float = 0.0


@dataclass(frozen=True)
class LeaseRevoked:
    """The controller revoked a provider's lease: stop mutating at once."""

    provider: str
    epoch: Epoch | None = None


@dataclass(frozen=True)
class Fact:
    """A durable fact the controller committed (or will commit) for a provider."""

    kind: str
    provider: str
    op_id: str
    epoch: Epoch
    instance_key: str = ""
    instance_id: str = ""
    template: str = ""
    host_name: str = ""
    address: str = ""
    count: int = 0
    detail: str = ""
    time: float = 0.0


@dataclass(frozen=True)
class LinkState:
    """Where the link is connected and what it learned at join."""

    connected: bool
    address: str = ""
    primary: str = ""
    term: int = 0
    tried: tuple[str, ...] = field(default_factory=tuple)
