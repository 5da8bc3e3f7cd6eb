"""The simulated controller's lease checks (docs/protocol.md §5), on the lease table it keeps.

A lease is valid until its last grant or renewal + TTL on the monotonic clock; a revoked lease
stays in the table (nobody else gets the provider) until then, but fences nothing in.
"""

from __future__ import annotations

from orchestrator.sim.controller.clock import to_ms
from orchestrator.sim.controller.state import NO_EPOCH, Epoch, Lease, LeaseDenyV, LeaseGrantV, LeaseInfoV, RejectV


def live(leases: dict[str, Lease], provider: str, now: float) -> Lease | None:
    """``provider``'s lease if it has not expired at ``now`` (revoked or not)."""
    lease = leases.get(provider)
    if lease is not None and lease.expires > now:
        return lease
    return None


def fence(lease: Lease | None, holder: str, provider: str, epoch: Epoch) -> RejectV | None:
    """``staleEpoch`` unless ``holder`` holds ``lease`` (live, not revoked) with ``epoch``."""
    current = lease.epoch if lease is not None and not lease.revoked else NO_EPOCH
    if lease is None or lease.revoked or lease.holder != holder or lease.epoch != epoch:
        return RejectV(
            "staleEpoch",
            f"epoch {epoch[0]}.{epoch[1]} is not the current lease epoch of {provider!r} "
            f"held by {holder!r} (current {current[0]}.{current[1]})",
            current_epoch=current,
        )
    return None


def acquire_live(lease: Lease, holder: str, provider: str, now: float, ttl: float) -> LeaseGrantV | LeaseDenyV:
    """``acquire`` of a provider whose lease is live: renewed when ``holder``'s, else denied."""
    if lease.holder == holder and not lease.revoked:
        lease.expires = now + ttl
        return LeaseGrantV(provider, lease.epoch, to_ms(ttl), holder)
    return LeaseDenyV(
        provider,
        "" if lease.revoked else lease.holder,
        max(1, to_ms(lease.expires - now)),
        "revoked" if lease.revoked else "held",
    )


def renew(
    lease: Lease | None, holder: str, provider: str, epoch: Epoch, now: float, ttl: float
) -> LeaseGrantV | LeaseDenyV:
    """Extend a valid lease held by ``holder`` with ``epoch``; else why not."""
    if lease is None:
        return LeaseDenyV(provider, "", 0, "expired")
    if lease.revoked:
        return LeaseDenyV(provider, "", max(1, to_ms(lease.expires - now)), "revoked")
    if lease.holder != holder:
        return LeaseDenyV(provider, lease.holder, max(1, to_ms(lease.expires - now)), "notHolder")
    if lease.epoch != epoch:
        return LeaseDenyV(provider, lease.holder, 0, "staleEpoch")
    lease.expires = now + ttl
    return LeaseGrantV(provider, lease.epoch, to_ms(ttl), holder)


def release_refusal(lease: Lease, holder: str, provider: str, epoch: Epoch, now: float) -> LeaseDenyV | None:
    """Why ``holder`` may not release the valid ``lease`` with ``epoch`` (None: it may)."""
    if lease.holder != holder:
        return LeaseDenyV(provider, lease.holder, max(1, to_ms(lease.expires - now)), "notHolder")
    if lease.epoch != epoch:
        return LeaseDenyV(provider, lease.holder, 0, "staleEpoch")
    return None


def infos(leases: dict[str, Lease], now: float, grace_ms: int) -> list[LeaseInfoV]:
    """The lease table for ``status``, by provider."""
    return [
        LeaseInfoV(p, "" if lease.revoked else lease.holder, lease.epoch, to_ms(lease.expires - now), grace_ms)
        for p, lease in sorted(leases.items())
    ]
