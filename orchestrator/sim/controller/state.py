"""Plain values of the simulated controller's in-memory state (no I/O, no Cap'n Proto)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Epoch = tuple[int, int]
NO_EPOCH: Epoch = (0, 0)


@dataclass
class Session:
    """One connection as the core sees it: its role, identity, and how to reach it.

    ``send`` enqueues a frame body without blocking (the server's writer thread sends it);
    ``close`` asks the server to drop the connection after what is queued.
    """

    sid: int
    peer: str
    send: Callable[[bytes], None]
    close: Callable[[str], None]
    role: str = ""  # "", "provisioner", "worker", "admin"
    instance_id: str = ""  # provisioners: the lease holder, identity[/leaseInstance] (protocol.holder)
    cert_role: str = ""  # the role the verified client certificate names ("" without one)
    cert_identity: str = ""  # the identity the verified client certificate names
    providers: frozenset[str] = frozenset()
    host_id: int = 0  # workers: the host record this connection joined as
    last_seen: float = 0.0  # monotonic time of the last frame (workers' heartbeat check)


@dataclass
class Lease:
    """A provider lease in the primary's memory."""

    provider: str
    holder: str
    epoch: Epoch
    expires: float  # monotonic; valid while now < expires
    revoked: bool = False


@dataclass(frozen=True)
class LeaseGrantV:
    """A grant (or renewal)."""

    provider: str
    epoch: Epoch
    ttl_ms: int
    holder: str


@dataclass(frozen=True)
class LeaseDenyV:
    """A refusal, with who holds it and when to ask again."""

    provider: str
    holder: str
    retry_after_ms: int
    reason: str


@dataclass(frozen=True)
class RejectV:
    """A refused mutation (``reason``: staleEpoch, notPrimary, invalid)."""

    reason: str
    message: str
    redirect: str = ""
    current_epoch: Epoch = NO_EPOCH


@dataclass(frozen=True)
class ErrorV:
    """A request that cannot be served (``code`` as in the schema's ErrorCode)."""

    code: str
    message: str
    redirect: str = ""


@dataclass
class Host:
    """A host the controller knows: an expected host, a joined worker, or both."""

    hid: int
    # The factId of the expectedHost fact that made this record (0: a static host, no record):
    # the key of its durable state (joins, close) in the store.
    record_fact_id: int = 0
    host_name: str = ""
    instance_id: str = ""
    instance_key: str = ""
    op_id: str = ""
    provider: str = ""
    template: str = ""
    address: str = ""
    join_deadline_ms: int = 0
    joined_ms: int = 0
    idle_since_ms: int = 0
    session: Session | None = None
    ever_joined: bool = False
    busy_work: int = 0  # work id, 0 when idle
    closed: bool = False  # no new work; "closing" while busy_work, "closed" once it ends
    decommissioned: bool = False
    lost: bool = False
    overdue: bool = False
    disconnected_at: float = 0.0  # monotonic; 0 while connected
    # Wall-clock ms at which the cloud reclaims the host (an interruption notice); 0: none.
    reclaim_at_ms: int = 0

    @property
    def connected(self) -> bool:
        """Whether a worker connection is attached."""
        return self.session is not None

    def state(self) -> str:
        """The HostState name (schema enum) for this host."""
        if self.decommissioned:
            return "decommissioned"
        if self.lost:
            return "lost"
        if self.session is None:
            if self.ever_joined:
                return "disconnected"
            return "overdue" if self.overdue else "expected"
        if self.closed:
            return "closing" if self.busy_work else "closed"
        return "busy" if self.busy_work else "idle"


@dataclass
class Work:
    """Pending or running simulated work: needs ``hosts`` workers of ``template`` for ``duration`` s."""

    wid: int
    template: str
    hosts: int
    duration: float
    started: float = 0.0  # monotonic; 0 while pending
    host_ids: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class TemplateDemandV:
    """Demand against supply for one template."""

    template: str
    wanted: int
    pending_hosts: int
    in_flight: int
    joined: int
    idle: int
    busy: int


@dataclass(frozen=True)
class DemandV:
    """A whole demand picture."""

    seq: int
    term: int
    time_ms: int
    templates: tuple[TemplateDemandV, ...]


@dataclass(frozen=True)
class LeaseInfoV:
    """A lease as shown by status."""

    provider: str
    holder: str
    epoch: Epoch
    expires_in_ms: int
    grace_ends_in_ms: int
