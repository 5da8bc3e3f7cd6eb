"""The model world of a replay, as data: what is asked (jobs) and how the world answers.

Times are absolute Unix seconds on the virtual clock, which starts at :attr:`WorldModel.start`
(for a recording, its first record's time: the replay's facts and the recorded ones compare
directly). Built by :mod:`.recorded` (from a flight recording) or :mod:`.swf` (from a workload
trace); read by :mod:`.engine`, :mod:`.controller` and :mod:`.runner`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

CAPACITY: Final = "capacity"
QUOTA: Final = "quota"

# Latencies used when the source says nothing (a trace; a recording that launched nothing):
# about what the simulated world measures (docs/performance.md). Documented in docs/replay.md.
DEFAULT_LAUNCH: Final = 2.0
DEFAULT_JOIN: Final = 20.0
# A return when the source says nothing: the host closed, decommissioned and its instance gone
# at one instant (a recording says how long its returns took).
DEFAULT_GIVEBACK: Final = 0.0


@dataclass(frozen=True)
class Job:
    """Work as the controller's queue holds it: ``hosts`` hosts of ``template`` for ``duration`` s,
    submitted at ``submit`` (the simulated controller's ``Work``)."""

    submit: float
    template: str
    hosts: int
    duration: float


@dataclass(frozen=True)
class RefusalWindow:
    """The cloud refused creates from ``start`` to ``end``: ``capacity`` on one offering
    (``placement``, ``flavor[@zone][@subnet]``) of ``provider``, or ``quota`` on every offering
    of ``provider`` (``placement`` ``""``)."""

    scope: str
    provider: str
    placement: str
    start: float
    end: float

    def covers(self, provider: str, placement: str, when: float) -> bool:
        """Whether a create of ``placement`` on ``provider`` at ``when`` is refused by this window."""
        if provider != self.provider or not self.start <= when <= self.end:
            return False
        return self.scope == QUOTA or placement == self.placement


@dataclass(frozen=True)
class Loss:
    """The cloud takes back one live instance of ``template`` on ``provider`` at ``at``
    (``reason`` as the cloud lists it: ``spot-reclaim``); with ``notice`` > 0 it says so that
    many seconds before (a spot interruption notice)."""

    at: float
    provider: str
    template: str
    reason: str = "spot-reclaim"
    notice: float = 0.0


@dataclass(frozen=True)
class Latencies:
    """Samples of how long the world takes, in seconds: a create op from its intent until the
    cloud made its instances (``launch``), an instance from made to joined at the controller
    (``join``: boot, bootstrap or first-boot join), a host from closed at the controller to its
    instance returned (``giveback``: the daemon's next pass, the decommission, the return op's
    apply). A draw picks one sample with the replay's seeded random generator; no samples: the
    default."""

    launch: tuple[float, ...] = ()
    join: tuple[float, ...] = ()
    giveback: tuple[float, ...] = ()

    def draw_launch(self, rng: random.Random) -> float:
        return _draw(self.launch, DEFAULT_LAUNCH, rng)

    def draw_join(self, rng: random.Random) -> float:
        return _draw(self.join, DEFAULT_JOIN, rng)

    def draw_giveback(self, rng: random.Random) -> float:
        return _draw(self.giveback, DEFAULT_GIVEBACK, rng)


def _draw(samples: Sequence[float], default: float, rng: random.Random) -> float:
    return float(rng.choice(samples)) if samples else default


@dataclass(frozen=True)
class WorldModel:
    """Everything a replay needs besides the configuration: the period, the jobs, the latencies,
    the refusal windows and the losses; ``source`` says where it was drawn from."""

    start: float
    end: float
    jobs: tuple[Job, ...]
    latencies: Latencies = field(default_factory=Latencies)
    refusals: tuple[RefusalWindow, ...] = ()
    losses: tuple[Loss, ...] = ()
    source: str = ""

    @property
    def templates(self) -> set[str]:
        return {j.template for j in self.jobs}

    def refused(self, provider: str, placement: str, when: float) -> RefusalWindow | None:
        """The window refusing a create of ``placement`` on ``provider`` at ``when`` (quota first)."""
        found = [w for w in self.refusals if w.covers(provider, placement, when)]
        return min(found, key=lambda w: w.scope != QUOTA) if found else None
