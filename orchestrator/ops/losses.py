"""The host-loss check the executor makes before each apply (design interface 3).

``orchestrator.workspace.cloudview.read_drift_stream`` reads drift from one refresh-only plan
(the tagged listing, ``read_listing``, only when an instance was deleted: it only gives
reasons); ``orchestrator.ops.hostloss.LossTracker`` (persisted suspects) decides which missing
instances are lost: at once when the cloud says reclaimed or expired, otherwise after two
consecutive observations. The executor needs only :class:`LossObserver`, so tests can inject one.

In a sharded provider each shard's observation reads its own drift; shards >= 1 have no listing
of their own (``list_tagged`` false), so when their drift shows a deleted instance the listing is
read from shard 0 (``shards.listing_dir``), the one state that lists the cloud.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from orchestrator.clients.terraform.engine import Engine
from orchestrator.errors import TerraformError
from orchestrator.ops.hostloss import LossTracker, LostInstance
from orchestrator.workspace.cloudview import Listing, read_drift_stream, read_listing
from orchestrator.workspace.shards import listing_dir
from orchestrator.workspace.terraform import instances_output

SUSPECTS_FILE = "lost-suspects.json"


class LossObserver(Protocol):
    """One observation: the instances lost as of now."""

    def observe(self) -> Sequence[LostInstance]:
        """Read the cloud's views once; the instances now known lost."""
        ...


class TrackerObserver:
    """Drift and listing of one working directory fed to the persisted tracker."""

    def __init__(self, engine: Engine, workdir: Path) -> None:
        self.engine = engine
        self.workdir = workdir
        self.listing_dir = listing_dir(workdir)
        self.tracker = LossTracker(workdir / SUSPECTS_FILE)

    def observe(self) -> Sequence[LostInstance]:
        """The instances lost as of now; a TerraformError (the cloud cannot be read) reaches the caller.

        A key missing for the first time is read again at once, with a second refresh-only plan:
        two consecutive reads that both find it gone confirm the loss, so the apply that follows
        neither re-creates it nor has to be refused for it. One read alone never declares a loss.
        """
        lost = list(self.read_once())
        pending = set(self.tracker.suspects()) - {item.instance_key for item in lost}
        if pending:
            lost += [item for item in self.read_once() if item.instance_key not in {i.instance_key for i in lost}]
        return lost

    def read_once(self) -> Sequence[LostInstance]:
        """One refresh-only plan fed to the tracker (one observation).

        The drift comes from the plan's ``-json`` stream; the listing is read only when the drift
        deleted an instance: it gives the reasons of deletions and decides nothing else, and
        reading it costs the saved plan's ``show -json`` (about a second per op under load,
        ``bench/bench_daemon.py``), paid before every create otherwise.
        """
        drift = read_drift_stream(self.engine, self.workdir, self.state_ids)
        if not drift.deleted:
            return list(self.tracker.observe(drift, None))
        return list(self.tracker.observe(drift, self.listing()))

    def state_ids(self) -> dict[str, str]:
        """Instance key → cloud id in this working directory's Terraform state."""
        return {k: str(v.get("id", "")) for k, v in instances_output(self.engine.output(self.workdir)).items()}

    def listing(self) -> Listing | None:
        """The cloud's listing for the reasons of a deletion; None when the module has none.

        A module without a real listing (tagged_supported false) says nothing about reasons:
        drift alone still finds losses, after two observations. Shard 0 lists the cloud itself
        (a failed read reaches the caller, as a failed drift read does); other shards take
        shard 0's.
        """
        if self.listing_dir != self.workdir:
            return self.shard0_listing()
        listing = read_listing(self.engine, self.workdir)
        return listing if listing.supported else None

    def shard0_listing(self) -> Listing | None:
        """The listing of shard 0, read only when this shard's drift needs reasons; None when unread.

        Unreadable is not fatal here: without reasons the two-observation rule still applies.
        """
        try:
            listing = read_listing(self.engine, self.listing_dir)
        except TerraformError:
            return None
        return listing if listing.supported else None


def observer_for(engine: Engine, workdir: Path) -> LossObserver:
    """The real loss observer of ``workdir``."""
    return TrackerObserver(engine, workdir)
