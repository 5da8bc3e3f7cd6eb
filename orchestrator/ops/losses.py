"""The host-loss check the executor makes before each apply (design interface 3).

Two kinds of observation feed ``orchestrator.ops.hostloss.LossTracker`` (persisted suspects),
which decides which missing instances are lost: at once when the cloud says reclaimed or
expired, otherwise after two consecutive observations.

* :meth:`LossObserver.record`: the refresh of a plan the caller made anyway (a create op's own
  plan). Its ``-json`` stream carries a ``resource_drift`` ``delete`` for every managed instance
  the cloud no longer has (``orchestrator.workspace.cloudview.drift_from_stream``), so it costs
  no Terraform run: nothing deleted forgives every suspect; a deletion makes a suspect, and the
  caller then runs :meth:`~LossObserver.observe`.
* :meth:`LossObserver.observe`: reads the cloud itself, one refresh-only plan's drift
  (``read_drift_stream``; the tagged listing, ``read_listing``, only when an instance was
  deleted: it only gives reasons), and a second one at once while a suspect is still unjudged.

The executor needs only :class:`LossObserver`, so tests can inject one.

In a sharded provider each shard's observation reads its own drift; shards >= 1 have no listing
of their own (``list_tagged`` false), so when their drift shows a deleted instance the listing is
read from shard 0 (``shards.listing_dir``), the one state that lists the cloud.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from orchestrator.clients.terraform.engine import Engine
from orchestrator.clients.terraform.messages import PlanResult
from orchestrator.errors import TerraformError
from orchestrator.model.labels import AS_IS, LabelMap
from orchestrator.ops.hostloss import SUSPECTS_FILE, LossTracker, LostInstance, PreviewTracker
from orchestrator.workspace.cloudview import Drift, Listing, drift_from_stream, read_drift_stream, read_listing
from orchestrator.workspace.documents import Document, local_document
from orchestrator.workspace.shards import listing_dir
from orchestrator.workspace.terraform import instances_output
from orchestrator.workspace.workdir import ProviderWorkdir

__all__ = ["SUSPECTS_FILE", "LossObserver", "TrackerObserver", "observer_for", "preview_losses"]


class LossObserver(Protocol):
    """Observations of one working directory: the instances lost as of now."""

    def observe(self) -> Sequence[LostInstance]:
        """Read the cloud's views (twice while a suspect is unjudged); the instances now known lost."""
        ...

    def record(self, plan: PlanResult) -> Drift:
        """Count the refresh of ``plan`` (made by the caller over this working directory) as one
        observation; its drift of managed instances. Declares no loss: when the drift deleted an
        instance, the caller asks :meth:`observe`."""
        ...


class TrackerObserver:
    """Drift and listing of one working directory fed to the persisted tracker."""

    def __init__(
        self, engine: Engine, workdir: Path, tracker: LossTracker | None = None, labels: LabelMap | None = None
    ) -> None:
        self.engine = engine
        self.workdir = workdir
        # The module's label map: the listing's tags are read through it (its reasons are by id).
        self.labels = labels if labels is not None else AS_IS
        self.listing_dir = listing_dir(workdir)
        self.tracker = tracker if tracker is not None else LossTracker(workdir / SUSPECTS_FILE)

    def observe(self) -> Sequence[LostInstance]:
        """The instances lost as of now; a TerraformError (the cloud cannot be read) reaches the caller.

        A key missing for the first time is read again at once, with a second refresh-only plan:
        two consecutive reads that both find it gone confirm the loss, so the apply that follows
        neither re-creates it nor has to be refused for it. One read alone never declares a loss.
        A deletion already counted by :meth:`record` (the op's plan) is a suspect missing once
        before the first read here, so that read is its second observation and no other follows.
        """
        lost = list(self.read_once())
        pending = set(self.tracker.suspects()) - {item.instance_key for item in lost}
        if pending:
            lost += [item for item in self.read_once() if item.instance_key not in {i.instance_key for i in lost}]
        return lost

    def record(self, plan: PlanResult) -> Drift:
        """The plan's drift, fed to the tracker as one observation without a listing.

        Nothing deleted forgives every suspect (the plan saw them present), so "two consecutive
        observations" stays true when most observations are op plans. A deletion counts once:
        the :meth:`observe` that follows needs one read of its own, not two, to judge it. What
        the tracker would declare here is not returned: :meth:`observe` reads again, with the
        listing's reasons, and reports it then (or forgives it, if that read sees it back).
        """
        drift = drift_from_stream(plan, self.state_ids)
        self.tracker.observe(drift, None)
        return drift

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
        return {
            k: str(v.get("id", "")) for k, v in instances_output(self.engine.output(self.workdir), self.labels).items()
        }

    def listing(self) -> Listing | None:
        """The cloud's listing for the reasons of a deletion; None when the module has none.

        A module without a real listing (tagged_supported false) says nothing about reasons:
        drift alone still finds losses, after two observations. Shard 0 lists the cloud itself
        (a failed read reaches the caller, as a failed drift read does); other shards take
        shard 0's.
        """
        if self.listing_dir != self.workdir:
            return self.shard0_listing()
        listing = read_listing(self.engine, self.workdir, self.labels)
        return listing if listing.supported else None

    def shard0_listing(self) -> Listing | None:
        """The listing of shard 0, read only when this shard's drift needs reasons; None when unread.

        Unreadable is not fatal here: without reasons the two-observation rule still applies.
        """
        try:
            listing = read_listing(self.engine, self.listing_dir, self.labels)
        except TerraformError:
            return None
        return listing if listing.supported else None


def _located(workdir: ProviderWorkdir | Path) -> tuple[Path, Document, LabelMap | None]:
    """The working directory, its suspects' document and its label map (a bare path: the local
    file in it, tags as they are)."""
    if isinstance(workdir, ProviderWorkdir):
        return workdir.path, workdir.suspects, workdir.labels
    return Path(workdir), local_document(Path(workdir) / SUSPECTS_FILE), None


def observer_for(engine: Engine, workdir: ProviderWorkdir | Path) -> LossObserver:
    """The real loss observer of ``workdir`` (its suspects where the working directory keeps them)."""
    path, suspects, labels = _located(workdir)
    return TrackerObserver(engine, path, LossTracker(suspects), labels)


def preview_losses(engine: Engine, workdir: ProviderWorkdir | Path) -> list[LostInstance]:
    """The instances the executor's next observation of ``workdir`` would judge lost, read-only.

    The same reads and rules as :meth:`TrackerObserver.observe` (a drift read, a second one at
    once while a suspect is unjudged, the listing's reasons), started from the persisted
    suspects; nothing is written (:class:`~orchestrator.ops.hostloss.PreviewTracker`), no fact
    is committed and no lease is needed. A create's own plan and the read that follows it are
    two observations, so whatever both reads here find gone is what that create retires.
    ``xceprov plan`` shows these as lost; ``xceprov apply`` refuses a bundle whose preview
    showed other losses than this read finds (docs/operations.md, "Previews and host loss").
    The caller holds the working directory's lock; its desired set must exist.
    """
    path, suspects, labels = _located(workdir)
    observer = TrackerObserver(engine, path, PreviewTracker(suspects), labels)
    return sorted(observer.observe(), key=lambda item: item.instance_key)
