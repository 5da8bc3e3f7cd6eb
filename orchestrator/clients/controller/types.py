"""Plain typed values the controller link hands to the rest of the orchestrator.

They carry no Cap'n Proto objects: a pycapnp reader is only valid while its message is open, so
the link converts every reply and push into these frozen dataclasses on the reader thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Facts, epochs and demand are model values (the layers above use them without the link); they
# are re-exported here because they are also what the link hands out.
from orchestrator.model.demand import DemandSnapshot as DemandSnapshot
from orchestrator.model.demand import TemplateDemand as TemplateDemand
from orchestrator.model.facts import Epoch as Epoch
from orchestrator.model.facts import Fact as Fact


@dataclass(frozen=True)
class LeaseGrant:
    """The controller granted (or renewed) a provider's lease."""

    provider: str
    epoch: Epoch
    ttl: float
    holder: str = ""  # whom the controller granted it to: identity[/leaseInstance] (protocol.holder)


@dataclass(frozen=True)
class LeaseDenied:
    """Another instance holds the provider's lease (or the grace after a failover is running)."""

    provider: str
    holder: str
    retry_after: float
    reason: str = ""


@dataclass(frozen=True)
class HostInfo:
    """One host as the controller sees it (times in unix seconds, 0 when not set)."""

    host_name: str
    state: str
    instance_id: str = ""
    instance_key: str = ""
    op_id: str = ""
    provider: str = ""
    template: str = ""
    address: str = ""
    idle_since: float = 0.0
    join_deadline: float = 0.0
    joined_at: float = 0.0
    # When the cloud reclaims the host (an interruption notice the controller was told of); 0: none.
    reclaim_at: float = 0.0


@dataclass(frozen=True)
class HostEvent:
    """A host joined, became idle, busy, closed, decommissioned, overdue or was lost."""

    kind: str
    host: HostInfo
    time: float = 0.0


@dataclass(frozen=True)
class LeaseRevoked:
    """The controller revoked a provider's lease: stop mutating at once."""

    provider: str
    epoch: Epoch | None = None
    reason: str = ""


@dataclass(frozen=True)
class LeaseInfo:
    """A provider's lease by the controller's clock (``xceprov status``)."""

    provider: str
    holder: str
    epoch: Epoch
    expires_in: float
    grace_ends_in: float = 0.0


@dataclass(frozen=True)
class TemplateReason:
    """Why a provisioner launched what it did for a template, or nothing (``reportReasons``)."""

    template: str
    code: str
    detail: str = ""
    provider: str = ""
    until: float | None = None  # unix seconds the hold ends (None: not known)


@dataclass(frozen=True)
class ControllerStatus:
    """The controller's view for ``xceprov status``."""

    controller_id: str
    term: int
    primary: str
    leases: tuple[LeaseInfo, ...]
    demand: DemandSnapshot
    hosts: tuple[HostInfo, ...]
    connections: int = 0
    pending_work: int = 0
    running_work: int = 0
    # Unix seconds at which the current term started (0.0: the controller does not report it).
    # A new term means a failover or restart: the orphan scan's settle window counts from here.
    term_started: float = 0.0
    # The latest reason per template the provisioners reported (empty from an older controller).
    reasons: tuple[TemplateReason, ...] = ()


@dataclass(frozen=True)
class FactPage:
    """The facts of one ``queryFacts`` read (every page of it), oldest first.

    ``first_id`` is the lowest id the controller sent and ``last_id`` the id of the last fact
    it sent (0 when it sent none), counting the facts skipped for a kind this version does not know:
    the next incremental read asks from ``last_id``, so a skipped fact is not read again.
    """

    facts: tuple[Fact, ...]
    first_id: int = 0
    last_id: int = 0


@dataclass(frozen=True)
class LinkState:
    """Where the link is connected and what it learned at join."""

    connected: bool
    address: str = ""
    primary: str = ""
    term: int = 0
    controller_id: str = ""
    lease_ttl: float = 0.0
    reconnects: int = 0
    last_error: str = ""
    tried: tuple[str, ...] = field(default_factory=tuple)
