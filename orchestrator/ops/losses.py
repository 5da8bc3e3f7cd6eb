"""The host-loss check the executor makes before each apply (design interface 3).

``orchestrator.ops.hostloss.LossTracker`` (persisted suspects) and
``orchestrator.workspace.cloudview`` (``read_drift``, ``read_listing``) find instances deleted
behind our back. The executor needs only :class:`LossObserver`; :func:`observer_for` builds the
real one for a working directory. The two modules are imported by name at call time so that
this module does not depend on their arrival order; when they are missing the observer is
``None`` and the executor audits that no loss check ran (never silently).
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from orchestrator.clients.terraform.engine import Engine
from orchestrator.errors import TerraformError

SUSPECTS_FILE = "lost-suspects.json"


class Lost(Protocol):
    """One lost instance (``LostInstance`` of the host-loss tracker)."""

    instance_key: str
    instance_id: str
    reason: str
    evidence: dict[str, Any]


class LossObserver(Protocol):
    """One observation: the instances lost as of now."""

    def observe(self) -> Sequence[Lost]:
        """Read the cloud's views once; the instances now known lost."""
        ...


class _TrackerObserver:
    """Drift and listing of one working directory fed to the persisted tracker."""

    def __init__(self, engine: Engine, workdir: Path, cloudview: Any, tracker: Any) -> None:
        self.engine = engine
        self.workdir = workdir
        self.cloudview = cloudview
        self.tracker = tracker

    def observe(self) -> Sequence[Lost]:
        drift = self.cloudview.read_drift(self.engine, self.workdir)
        try:
            listing = self.cloudview.read_listing(self.engine, self.workdir)
        except TerraformError:
            listing = None  # drift alone still finds losses, after two observations
        if listing is not None and not listing.supported:
            listing = None
        return list(self.tracker.observe(drift, listing))


def observer_for(engine: Engine, workdir: Path) -> LossObserver | None:
    """The real loss observer of ``workdir``, or ``None`` when the host-loss modules are absent."""
    try:
        hostloss = importlib.import_module("orchestrator.ops.hostloss")
        cloudview = importlib.import_module("orchestrator.workspace.cloudview")
    except ImportError:
        return None
    return _TrackerObserver(engine, workdir, cloudview, hostloss.LossTracker(workdir / SUSPECTS_FILE))
