"""The host side of a replay's controller as the executor sees it: its lease and its host calls.

:class:`ReplayFence` is a lease that never goes (epoch :data:`REPLAY_EPOCH`); :class:`ReplayHosts`
is the executor's :class:`~orchestrator.ops.hosts.HostControl` over the
:class:`~orchestrator.replay.controller.ModelController` (whose own ``hosts`` is the pass's view,
without a provider); :func:`host_info` is a simulated host as ``hostStatus`` gives it.
"""

from __future__ import annotations

from typing import Final, Protocol

from orchestrator.clients.controller.types import HostInfo, TemplateDemand
from orchestrator.model.facts import Epoch
from orchestrator.sim.controller.state import Host, Session, TemplateDemandV

# The epoch of every mutation in a replay: the replay's lease never goes.
REPLAY_EPOCH: Final = Epoch(1, 1)


def _ignore(_value: object) -> None:
    """A worker connection's send and close: nothing is sent in a replay."""


# A joined worker's connection as the simulated ``Host`` reads it (``session`` not None: connected).
WORKER: Final = Session(0, "replay", _ignore, _ignore, role="worker")


class ReplayFence:
    """The fence of a replay: every provider's lease is held, always, under :data:`REPLAY_EPOCH`."""

    def gate(self, provider: str) -> Epoch:
        return REPLAY_EPOCH

    def valid(self, provider: str) -> bool:
        return True


def ms(t: float) -> int:
    return round(t * 1000)


def host_info(host: Host) -> HostInfo:
    """The simulated host as ``hostStatus`` gives it (as ``sim/controller/wire.fill_host`` does)."""
    state = host.state()
    return HostInfo(
        host_name=host.host_name,
        state=state,
        instance_id=host.instance_id,
        instance_key=host.instance_key,
        op_id=host.op_id,
        provider=host.provider,
        template=host.template,
        address=host.address,
        idle_since=host.idle_since_ms / 1000 if state in ("idle", "closed") else 0.0,
        join_deadline=host.join_deadline_ms / 1000,
        joined_at=host.joined_ms / 1000,
        reclaim_at=host.reclaim_at_ms / 1000,
    )


def template_demand(t: TemplateDemandV) -> TemplateDemand:
    return TemplateDemand(t.template, t.wanted, t.pending_hosts, t.in_flight, t.joined, t.idle, t.busy)


class HostCalls(Protocol):
    """The model controller's host calls (``ModelController``)."""

    def hosts_of(self, provider: str) -> list[HostInfo]: ...

    def close(self, provider: str, epoch: Epoch, host: HostInfo, reason: str) -> str: ...

    def decommission(self, provider: str, epoch: Epoch, host: HostInfo, reason: str, force: bool = False) -> None: ...


class ReplayHosts:
    """:class:`~orchestrator.ops.hosts.HostControl` over a :class:`ModelController` (its ``hosts``
    takes a provider, the view's none)."""

    def __init__(self, controller: HostCalls) -> None:
        self.controller = controller

    def hosts(self, provider: str) -> list[HostInfo]:
        return self.controller.hosts_of(provider)

    def close(self, provider: str, epoch: Epoch, host: HostInfo, reason: str) -> str:
        return self.controller.close(provider, epoch, host, reason)

    def decommission(self, provider: str, epoch: Epoch, host: HostInfo, reason: str, force: bool = False) -> None:
        self.controller.decommission(provider, epoch, host, reason, force)
