"""Demand: how many hosts of which template would let pending jobs run, against the supply.

The controller pushes a whole snapshot each time (level-triggered, with a resync after every
reconnect); a receiver keeps the newest by ``(term, seq)``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TemplateDemand:
    """Demand against supply of one host template, as the controller sees it."""

    template: str
    wanted: int
    pending_hosts: int = 0
    in_flight: int = 0
    joined: int = 0
    idle: int = 0
    busy: int = 0


@dataclass(frozen=True)
class DemandSnapshot:
    """A level-triggered demand snapshot: the whole picture, ordered by ``(term, seq)``."""

    seq: int
    term: int = 0
    time: float = 0.0
    templates: tuple[TemplateDemand, ...] = ()

    def order(self) -> tuple[int, int]:
        """The key a receiver keeps the newest snapshot by."""
        return (self.term, self.seq)
