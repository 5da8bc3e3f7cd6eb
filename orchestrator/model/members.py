"""Daemons sharing one database: what a member row says, and who holds which provider by them.

With ``terraform.backend: pg`` every daemon heartbeats a member row in the shared store
(``orchestrator.clients.postgres``): its instance (the lease holder's process instance), its
label, the providers it is configured for and those it holds with their epochs. The daemon reads
the live rows to deal the providers (``orchestrator.daemon.share``); ``xceprov status`` reads
them to say which instance holds what. The protocols here are what both need of the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

# The lease TTL assumed until the controller names its own at join (the simulated controller's
# default): the live window of the members (:func:`live_window`) derives from it.
DEFAULT_LEASE_TTL: Final = 15.0

# A member is live while its heartbeat is younger than this many of the longest heartbeat
# intervals (TTL/3): one missed heartbeat is tolerated, the second deals it out.
LIVE_BEATS: Final = 2


def live_window(ttl: float) -> float:
    """How long a member's heartbeat keeps it live: ``LIVE_BEATS`` heartbeat intervals at their
    longest (TTL/3 each), so two thirds of the lease TTL.

    Shorter than the TTL on purpose: a killed member's leases lapse one TTL after their last
    renewal (every TTL/3), and its providers must be dealt to the survivors by then, so that
    their asks are waiting when the controller frees the leases (a takeover within TTL + grace +
    one reconcile interval). Dealing early is safe: the controller's lease stays the fence, and
    an ask for a lease still held is only denied (with the time it is held until, when the
    survivor's keeper asks again).
    """
    return LIVE_BEATS * ttl / 3.0


class MemberRow(Protocol):
    """One live member as the store reads it (``orchestrator.clients.postgres.Member``)."""

    @property
    def instance(self) -> str: ...
    @property
    def label(self) -> str: ...
    @property
    def configured(self) -> Sequence[str]: ...
    @property
    def held(self) -> Mapping[str, str]: ...
    @property
    def age_s(self) -> float: ...


class MemberStore(Protocol):
    """What the membership and ``xceprov status`` need of the shared store."""

    def heartbeat(
        self,
        instance: str,
        label: str,
        configured: Sequence[str],
        held: Mapping[str, str],
        live_for: float | None = None,
    ) -> None:
        """Write this member's row (the server's clock stamps it), live for ``live_for`` seconds."""
        ...

    def members(self, live_within: float) -> Sequence[MemberRow]:
        """The members whose heartbeat is younger than ``live_within`` seconds."""
        ...

    def leave(self, instance: str) -> None:
        """Remove this member's row."""
        ...

    def close(self) -> None:
        """Close the connection."""
        ...


@dataclass(frozen=True)
class Holder:
    """Who holds one provider's lease: the process instance, its label, the epoch tag."""

    instance: str
    label: str
    epoch: str


def _epoch_key(tag: str) -> tuple[int, int]:
    term, _, seq = tag.partition(".")
    try:
        return int(term), int(seq)
    except ValueError:
        return (-1, -1)


def holders(members: Iterable[MemberRow]) -> dict[str, Holder]:
    """Each provider some live member says it holds, to that member; when two say so (a
    handover seen between their heartbeats), the one with the newer epoch."""
    out: dict[str, Holder] = {}
    for member in members:
        for provider, epoch in member.held.items():
            known = out.get(provider)
            if known is None or _epoch_key(epoch) > _epoch_key(known.epoch):
                out[provider] = Holder(member.instance, member.label, epoch)
    return out
