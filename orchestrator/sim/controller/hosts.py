"""The simulated controller's host records: finding one, matching a joining worker, and what a
fact, a join or a restart writes into a record.

These are the rules only; the core applies them under its lock and makes the durable writes and
the host events that go with them.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.protocol.jointoken import TOKEN_OTHER_HOST
from orchestrator.sim.controller.state import ErrorV, Host, Session
from orchestrator.sim.controller.store import FactRecord, HostRecord


def find_host(hosts: dict[int, Host], instance_id: str, host_name: str, instance_key: str = "") -> Host | None:
    """The live (not decommissioned) host with this instance id, else instance key, else name."""
    if instance_id:
        for h in hosts.values():
            if h.instance_id == instance_id and not h.decommissioned:
                return h
    if instance_key:
        for h in hosts.values():
            if h.instance_key == instance_key and not h.decommissioned:
                return h
    if host_name:
        for h in hosts.values():
            if h.host_name == host_name and not h.decommissioned:
                return h
    return None


def match_worker(hosts: dict[int, Host], host_name: str, instance_id: str, credential_key: str | None) -> Host | None:
    """The record a joining worker belongs to: by its credential's instance key, its instance id,
    then its host name."""
    if credential_key:
        live = (h for h in hosts.values() if not h.decommissioned)
        host = next((h for h in live if h.instance_key == credential_key), None)
        if host is not None:
            return host
    if instance_id:
        host = next((h for h in hosts.values() if h.instance_id == instance_id), None)
        if host is not None:
            return host
    return next((h for h in hosts.values() if h.host_name == host_name and not h.decommissioned), None)


def credential_refusal(host: Host, host_name: str, credential_key: str) -> ErrorV | None:
    """A worker's credential made for another record (its instance key or host name differs)."""
    if host.instance_key and host.instance_key != credential_key:
        return ErrorV(
            "refused", f"{TOKEN_OTHER_HOST}: host {host_name!r}: its credential is for another host's instance key"
        )
    if host.host_name and host.host_name != host_name:
        return ErrorV("refused", f"{TOKEN_OTHER_HOST}: host {host_name!r}: its credential names another host")
    return None


def attach_worker(
    host: Host,
    session: Session,
    host_name: str,
    instance_id: str,
    template: str,
    extra: dict[str, str],
    credential_key: str | None,
    now_ms: int,
) -> None:
    """Write a worker's join into its record (connected, neither lost nor overdue)."""
    host.session = session
    host.host_name = host_name
    if credential_key is None:
        host.instance_id = instance_id or host.instance_id
    else:  # authenticated: the recorded id wins over the one the worker asserts
        host.instance_id = host.instance_id or instance_id
    host.template = host.template or template
    host.address = host.address or extra.get("address", "")
    host.instance_key = host.instance_key or credential_key or extra.get("instance_key", "")
    host.op_id = host.op_id or extra.get("op_id", "")
    host.lost = False
    host.overdue = False
    host.disconnected_at = 0.0
    if not host.ever_joined or not host.joined_ms:
        host.joined_ms = now_ms
    host.ever_joined = True


def expect(host: Host, f: FactRecord) -> bool:
    """Write an ``expectedHost`` fact into its record; True when the fact makes the record (its
    first expectedHost fact)."""
    # The first expectedHost fact of a record names it for good: replaying the facts
    # after a restart gives the record the same key, which finds its joins again.
    new_record = not host.record_fact_id
    host.record_fact_id = host.record_fact_id or f.fact_id
    host.instance_id = f.instance_id or host.instance_id
    host.host_name = f.host_name or host.host_name
    host.instance_key = f.instance_key or host.instance_key
    host.op_id = f.op_id
    host.provider = f.provider
    host.template = f.template
    host.address = f.address or host.address
    host.join_deadline_ms = f.join_deadline_ms
    host.overdue = False
    return new_record


def restore(h: Host, record: HostRecord, now: float) -> None:
    """A record's close and joins as the store kept them across a restart."""
    h.closed = record.closed_ms > 0
    if record.joined_ms:
        # Joined before the restart: no live worker yet, so disconnected (never
        # expected or overdue), and lost if it does not rejoin within the loss timeout
        # counted from now, as if its connection had just dropped (it did).
        h.ever_joined = True
        h.joined_ms = record.joined_ms
        h.instance_id = record.instance_id or h.instance_id
        h.host_name = record.host_name or h.host_name
        h.disconnected_at = now


def mark_absent(
    hosts: dict[int, Host], now: float, now_ms: int, lost_after: float, event: Callable[[str, Host], None]
) -> None:
    """Mark ``lost`` a joined host disconnected for ``lost_after`` seconds, and ``joinOverdue`` one
    never joined past its join deadline (each once, with its host event)."""
    for h in list(hosts.values()):
        gone = h.session is None and h.ever_joined and not h.lost and not h.decommissioned
        if gone and h.disconnected_at and now - h.disconnected_at >= lost_after:
            h.lost = True
            event("lost", h)
        if not h.ever_joined and not h.overdue and h.join_deadline_ms and now_ms > h.join_deadline_ms:
            h.overdue = True
            event("joinOverdue", h)
