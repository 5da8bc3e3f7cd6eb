"""What one reconcile pass reads from the controller: demand, hosts, facts, whether it is there.

:class:`ControllerView` is the loop's only way to look at the controller (mutations go through
the executor). :class:`LinkView` adapts a :class:`~orchestrator.clients.controller.link.ControllerLink`:

* ``demand()`` is the link's newest pushed snapshot (level-triggered, resynced after a join);
* ``hosts()`` asks ``hostStatus`` each time: the link's own host cache is only as fresh as its
  last resync, and the pass decides joins, idleness and reclaims from host states;
* ``facts(provider)`` asks ``queryFacts`` each time: after a lease is (re)gained another holder
  may have committed facts the link's cache never saw, and a gap counted from a stale fact list
  asks for hosts twice. It asks from the last fact id it saw (the protocol's resync rule), with
  a full read after a term change and every ten minutes (``clients.controller.factreader``);
* ``connected()`` is the link's join state.

Tests inject their own view (or wrap this one) to place a change between a read and an act.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from orchestrator.clients.controller.factreader import FactReader
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import DemandSnapshot, Fact, HostInfo

# Wall-clock seconds, comparable with the controller's times (idle_since, fact commit times,
# join deadlines); tests inject their own.
Clock = Callable[[], float]


class ControllerView(Protocol):
    """The controller as one pass reads it."""

    def demand(self) -> DemandSnapshot | None:
        """The newest demand snapshot, or None before the first one arrived."""
        ...

    def hosts(self) -> Sequence[HostInfo]:
        """Every host the controller knows now (all providers)."""
        ...

    def facts(self, provider: str) -> list[Fact]:
        """Every fact of ``provider``, oldest first."""
        ...

    def connected(self) -> bool:
        """Whether the link to the controller is joined right now."""
        ...


class LinkView:
    """:class:`ControllerView` over a controller link (see the module docstring)."""

    def __init__(self, link: ControllerLink, facts: FactReader | None = None) -> None:
        """``facts``: a reader shared with others (the daemon's status file); one of its own otherwise."""
        self.link = link
        self.reader = facts if facts is not None else FactReader(link)

    def demand(self) -> DemandSnapshot | None:
        """The link's newest snapshot."""
        return self.link.demand()

    def hosts(self) -> Sequence[HostInfo]:
        """``hostStatus`` of every provider."""
        return self.link.host_status()

    def facts(self, provider: str) -> list[Fact]:
        """Every fact of ``provider`` by fact id: ``queryFacts`` from the last id seen
        (:class:`~orchestrator.clients.controller.factreader.FactReader`)."""
        return self.reader.facts(provider)

    def connected(self) -> bool:
        """The link's join state."""
        return self.link.state().connected
