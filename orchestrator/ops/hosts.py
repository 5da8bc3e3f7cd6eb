"""What the executor asks the controller about hosts: who runs work, drain, decommission.

``LinkHosts`` goes over the controller link (every call fenced by the lease epoch at the
controller). ``NoHosts`` is standalone mode: no controller, so no host is known to have joined
and nothing can be drained; a return says so in the audit log.
"""

from __future__ import annotations

from typing import Protocol

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import HostInfo
from orchestrator.model.facts import Epoch

# States of a host that still runs (or may still run) work; "closing" is a closed host whose
# work has not finished yet (docs/protocol.md, hostClose).
BUSY_STATES = frozenset({"busy", "closing"})
# States of a host whose worker has joined and is connected (a decommission play has a worker to stop).
JOINED_STATES = frozenset({"busy", "closing", "idle", "closed", "disconnected"})


class HostControl(Protocol):
    """The controller's side of a return."""

    def hosts(self, provider: str) -> list[HostInfo]:
        """Hosts of ``provider`` as the controller sees them now."""
        ...

    def close(self, provider: str, epoch: Epoch, host: HostInfo, reason: str) -> str:
        """Drain: no new work on ``host``; the controller's answer, ``closed`` (it ran no work)
        or ``closing`` (its work still runs; it becomes ``closed`` when that ends)."""
        ...

    def decommission(self, provider: str, epoch: Epoch, host: HostInfo, reason: str, force: bool = False) -> None:
        """Stop the host's worker; the controller refuses its rejoin."""
        ...


class LinkHosts:
    """Host calls over the controller link."""

    def __init__(self, link: ControllerLink) -> None:
        self.link = link

    def hosts(self, provider: str) -> list[HostInfo]:
        """``hostStatus`` of the provider."""
        return self.link.host_status(provider=provider)

    def close(self, provider: str, epoch: Epoch, host: HostInfo, reason: str) -> str:
        """``hostClose``; the host's state after it (``closed`` or ``closing``)."""
        return self.link.close_host(
            provider, epoch, instance_id=host.instance_id, host_name=host.host_name, reason=reason
        )

    def decommission(self, provider: str, epoch: Epoch, host: HostInfo, reason: str, force: bool = False) -> None:
        """``hostDecommission``."""
        # The controller refuses a host that runs work unless forced (the operator said so).
        self.link.decommission_host(
            provider, epoch, instance_id=host.instance_id, host_name=host.host_name, reason=reason, force=force
        )


class NoHosts:
    """Standalone mode: no controller knows any host."""

    def hosts(self, provider: str) -> list[HostInfo]:
        """None."""
        return []

    def close(self, provider: str, epoch: Epoch, host: HostInfo, reason: str) -> str:
        """Never called (no host is known)."""
        raise AssertionError("standalone mode knows no hosts to close")

    def decommission(self, provider: str, epoch: Epoch, host: HostInfo, reason: str, force: bool = False) -> None:
        """Never called (no host is known)."""
        raise AssertionError("standalone mode knows no hosts to decommission")
