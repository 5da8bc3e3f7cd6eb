"""Hosts that run work, before a return: refused (``destroy``) or drained (``return``), then decommissioned.

A host that joined and runs work (state ``busy``, or ``closing``: closed, work not finished) is
never returned silently: ``destroy`` refuses it unless forced (audited), ``return`` closes it at
the controller and waits until its work ends or the drain timeout, then follows the provider's
``drain_policy``. Joined hosts then get the decommission play and ``hostDecommission``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from orchestrator.clients.controller.types import HostInfo
from orchestrator.errors import HostBusy, RetryableError
from orchestrator.model.config import Config
from orchestrator.ops.hosts import BUSY_STATES, JOINED_STATES, HostControl
from orchestrator.ops.recorder import OpRecorder

Decommission = Callable[[str, Sequence[HostInfo]], Mapping[str, str]]


class ReturnContext(Protocol):
    """What draining needs of the executor: its parts (``orchestrator.ops.executor.OpParts``
    fits), read-only."""

    @property
    def config(self) -> Config: ...

    @property
    def hosts(self) -> HostControl: ...

    @property
    def decommission(self) -> Decommission | None: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def sleep(self) -> Callable[[float], None]: ...

    @property
    def recorder(self) -> OpRecorder:
        """The gate and the audit entries of the op's steps."""
        ...


@dataclass(frozen=True)
class DrainSettings:
    """How a return treats hosts that run work."""

    drain: bool = True  # close and wait; False: refuse busy hosts (``destroy``) unless ``force``
    timeout: float | None = None  # None: the provider's ``drain_timeout``
    policy: str | None = None  # None: the provider's ``drain_policy``
    force: bool = False
    poll: float = 1.0
    # What the one line of a drain that timed out under policy ``wait`` tells to do next.
    then: str = "run the return again later, or with --now"


def host_map(parts: ReturnContext, provider: str) -> dict[str, HostInfo]:
    """The controller's hosts of ``provider`` by instance key (and by instance id)."""
    out: dict[str, HostInfo] = {}
    for host in parts.hosts.hosts(provider):
        for ref in (host.instance_key, host.instance_id):
            if ref:
                out[ref] = host
    return out


def settle_hosts(
    parts: ReturnContext, provider: str, op_id: str, keys: Sequence[str], drain: DrainSettings
) -> dict[str, HostInfo]:
    """Refuse or drain busy hosts, then decommission the joined ones; the joined hosts by key."""
    known = host_map(parts, provider)
    joined = {k: known[k] for k in keys if k in known and known[k].state in JOINED_STATES}
    busy = sorted(k for k, h in joined.items() if h.state in BUSY_STATES)
    if busy and not drain.drain and not drain.force:
        names = ", ".join(joined[k].host_name or k for k in busy)
        parts.recorder.audit("op-return-refused", provider=provider, op=op_id, busy=busy)
        raise HostBusy(f"{names}: joined and running work; drain with `xceprov return`, or pass --force")
    if busy and drain.force:
        parts.recorder.audit("op-return-forced", provider=provider, op=op_id, busy=busy)
    forced = drain.force
    if drain.drain and joined:
        # drain_policy return at the timeout returns hosts still running work: forced, audited.
        forced = drain_hosts(parts, provider, op_id, joined, drain) or forced
    if joined:
        # The play first (the node manager stops the worker for good), then the controller
        # marks the hosts decommissioned and refuses their rejoin.
        outcome: Mapping[str, str] = {}
        if parts.decommission is not None:
            outcome = parts.decommission(provider, list(joined.values()))
        epoch = parts.recorder.gate(provider, op_id, "decommission")
        for host in joined.values():
            parts.hosts.decommission(provider, epoch, host, f"returned by op {op_id}", force=forced)
        parts.recorder.audit(
            "op-decommission",
            provider=provider,
            op=op_id,
            hosts=sorted(h.host_name for h in joined.values()),
            play=dict(outcome),
        )
    return joined


def drain_hosts(
    parts: ReturnContext, provider: str, op_id: str, joined: Mapping[str, HostInfo], drain: DrainSettings
) -> bool:
    """Close every joined host, then wait until none runs work, or the timeout and its policy.

    True when the timeout passed and the policy returns the hosts anyway (some still run work).
    """
    settings = parts.config.providers[provider]
    timeout = float(settings.drain_timeout if drain.timeout is None else drain.timeout)
    policy = drain.policy or settings.drain_policy
    epoch = parts.recorder.gate(provider, op_id, "drain")
    for host in joined.values():
        if host.state != "closed":
            parts.hosts.close(provider, epoch, host, f"draining for return by op {op_id}")
    parts.recorder.audit("op-drain", provider=provider, op=op_id, hosts=sorted(joined), timeout=timeout, policy=policy)
    deadline = parts.clock() + timeout
    while True:
        now_known = host_map(parts, provider)
        running = sorted(k for k in joined if k in now_known and now_known[k].state in BUSY_STATES)
        if not running:
            return False
        if parts.clock() >= deadline:
            parts.recorder.audit("op-drain-timeout", provider=provider, op=op_id, running=running, policy=policy)
            if policy == "return":
                return True
            raise RetryableError(
                f"{', '.join(running)}: still running work after the drain timeout ({timeout:g}s, "
                f"drain_policy wait); the hosts stay closed: {drain.then}",
                delay=max(timeout, 1.0),
            )
        parts.sleep(drain.poll)
