"""Facts and lease epochs: the durable records the controller commits for a provider.

The fact kinds are those of ``FactKind`` in ``orchestrator/protocol/provisioner.capnp``, spelt
the same way, so one enum serves the controller link and the simulated controller. ``FactKind``
is a ``StrEnum``: a member equals its wire name (``FactKind.LOST == "lost"``), so values read
from the wire or from a store compare without conversion.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orchestrator.model.tags import format_epoch


class FactKind(StrEnum):
    """The kinds of fact (schema enum ``FactKind``); the value is the schema's name."""

    # An op is about to create ``count`` hosts of ``template``; committed BEFORE any cloud call.
    REQUEST_INTENT = "requestIntent"
    # The cloud created instance ``instance_id`` for ``instance_key``.
    INSTANCE_CREATED = "instanceCreated"
    # An expected host: instance id, template, host name, address, join deadline.
    EXPECTED_HOST = "expectedHost"
    # Intent to return (terminate) the instance; committed BEFORE the cloud call.
    RETURNING = "returning"
    # The instance is gone in the cloud.
    RETURNED = "returned"
    # The instance disappeared without us (spot reclaim, out-of-band delete).
    LOST = "lost"
    # A tagged resource without a fact was found (``detail``: the evidence).
    ORPHAN_REPORTED = "orphanReported"
    # An orphan matched a live host and was adopted.
    ORPHAN_ADOPTED = "orphanAdopted"


# The kinds after which an instance no longer exists for the provisioner.
GONE_KINDS = frozenset({FactKind.RETURNED, FactKind.LOST})


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
class Fact:
    """A durable fact the controller committed (or will commit) for a provider."""

    kind: FactKind
    provider: str
    op_id: str
    epoch: Epoch
    instance_key: str = ""
    instance_id: str = ""
    template: str = ""
    host_name: str = ""
    address: str = ""
    count: int = 0
    join_deadline: float = 0.0
    detail: str = ""
    # Set by the controller when committed:
    fact_id: int = 0
    committed: float = 0.0
    holder: str = ""
