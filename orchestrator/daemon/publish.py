"""The daemon's status after each pass: the status file, the metrics made from it, systemd's status line.

:class:`StatusPublishing` is the part of :class:`.service.Daemon` that writes
``<state_dir>/daemon/status.json`` (the document of :mod:`.statusdoc`) and updates the metrics
from it after a pass or a scan (:meth:`~StatusPublishing.publish_status`), and when a bootstrap
batch starts during a pass (:meth:`~StatusPublishing.watched_bootstrap`: the hosts running, done
and failed so far), and rewrites the last status with a new state at a stop without a controller
round trip (:meth:`~StatusPublishing.rewrite_status`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from typing import Any

from orchestrator.clients.controller.factreader import FactReader
from orchestrator.clients.controller.keeper import LeaseKeeper
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import HostInfo
from orchestrator.daemon.bootstrapping import Bootstrapping
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.members import Membership
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.orphanscan import OrphanScans
from orchestrator.daemon.parts import DaemonOptions
from orchestrator.daemon.passfigures import PassFigures
from orchestrator.daemon.statusdoc import build_document, update_metrics
from orchestrator.errors import ControllerError, StoreUnavailable, XceprovError
from orchestrator.model.config import Config
from orchestrator.model.facts import Fact
from orchestrator.ops.executor import Bootstrap
from orchestrator.reconcile.bootstraps import BootstrapRecord, BootstrapTracker
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.noticebook import noticed_rows
from orchestrator.reconcile.refusals import RefusalMemory
from orchestrator.reconcile.report import PassReport
from orchestrator.reconcile.selected import SelectedOfferings
from orchestrator.workspace.daemonstatus import read_status, write_status
from orchestrator.workspace.sharedstore import cluster_documents

# The service's logger, as before the status had a module of its own (log filters keep working).
log = logging.getLogger("orchestrator.daemon.service")


class StatusPublishing:
    """The daemon's status file and metrics; :class:`.service.Daemon` sets the parts it reads."""

    lifecycle: Lifecycle
    options: DaemonOptions
    config: Config
    metrics: DaemonMetrics
    instance_id: str
    providers: list[str]
    started: float
    passes: int
    link: ControllerLink | None
    keeper: LeaseKeeper | None
    fact_reader: FactReader | None
    orphans: OrphanScans | None
    membership: Membership | None
    # The select: offerings the passes read (set at start): the status's spend prices with them.
    selected: SelectedOfferings | None = None
    # The last document written: a stop rewrites it with a new state.
    _document: dict[str, Any] | None
    # The breakers as last read, shown while the shared store cannot be read.
    _breakers_seen: Breakers | None = None
    # The hosts in a bootstrap play now, and the bootstrap records as last read (same reason).
    _bootstrapping: Bootstrapping | None = None
    _records_seen: list[BootstrapRecord] | None = None
    # The memory of refusals as last read (same reason).
    _refusals_seen: RefusalMemory | None = None
    _last_report: PassReport | None

    def watched_bootstrap(self, play: Bootstrap) -> Bootstrap:
        """``play`` whose hosts the status shows as running while it runs; the status is written
        when each batch starts (with the outcomes of the batches before)."""
        if self._bootstrapping is None:
            self._bootstrapping = Bootstrapping(self.metrics.bootstrap_played)
        return self._bootstrapping.around(play, lambda: self.publish_status(self._last_report, None))

    def publish_status(self, report: PassReport | None, duration: float | None) -> None:
        """The status file, the metrics and systemd's status line after a pass (``duration``) or a scan."""
        try:
            document = self._build(report, "stopping" if self.lifecycle.stopping else "running")
            write_status(self.config.state_dir, document)
            figures = PassFigures.of(report) if report is not None else None
            update_metrics(self.metrics, document, self.config, duration, figures)
            self._document = document
        except Exception:  # a status that cannot be written must not stop the loop
            log.exception("daemon status not written")
            return
        held = sum(1 for row in document["leases"] if row["held"])
        ops = len(report.ops) if report is not None else 0
        self.options.notifier.status(
            f"pass {self.passes} ({report.trigger if report is not None else '-'}): {ops} ops started; "
            f"leases {held}/{len(self.providers)}"
        )

    def _build(self, report: PassReport | None, state: str) -> dict[str, Any]:
        assert self.link is not None and self.keeper is not None and self.fact_reader is not None
        link, reader = self.link, self.fact_reader
        facts: dict[str, Sequence[Fact]]
        hosts: Sequence[HostInfo]
        try:
            # Fresh: another holder or a command may have committed facts the link never saw
            # (asked from the last fact id seen: the pass just read the rest).
            facts = {p: reader.facts(p) for p in self.providers}
            hosts = link.host_status()
        except ControllerError as exc:
            # The controller is away: the status matters most now; the link's last copy says
            # what was known (the pass, which reads fresh, did nothing on it).
            log.debug("status from the link's cache: %s", exc)
            facts = {p: link.facts(p) for p in self.providers}
            hosts = link.hosts()
        return build_document(
            daemon=self._daemon_member(state),
            report=report,
            leases=self.keeper.status(),
            breakers=self.shown_breakers(),
            facts=facts,
            hosts=hosts,
            now=self.options.clock(),
            orphans=self.orphans.to_json() if self.orphans is not None else None,
            store=self.membership.to_json() if self.membership is not None else None,
            bootstrap_records=self.shown_bootstrap_records(),
            bootstrapping=self._bootstrapping.running() if self._bootstrapping is not None else None,
            config=self.config,
            first_boot_failed=self.first_boot_failures(),
            refusals=self.shown_refusals(),
            notices=noticed_rows(self.config),
            selected=self.selected.last if self.selected is not None else {},
        )

    def first_boot_failures(self) -> list[Any]:
        """The failed first boots the status shows so far: those of the last document written,
        or, at the daemon's start, of the status file a daemon before it left."""
        document = self._document
        if document is None:
            try:
                found = read_status(self.config.state_dir)
            except XceprovError:  # a damaged file: it is written anew, without them
                found = None
            document = found.document if found is not None else {}
        member = document.get("first_boot")
        failed = member.get("failed") if isinstance(member, dict) else None
        return list(failed) if isinstance(failed, list) else []

    def shown_bootstrap_records(self) -> list[BootstrapRecord]:
        """The bootstrap records now; when they cannot be read (the shared store is away), as last read."""
        try:
            records = BootstrapTracker.load(self.config.state_dir, cluster_documents(self.config)).records()
        except (XceprovError, OSError) as exc:  # the rest of the status still matters
            log.debug("bootstrap records not read, as last read instead: %s", exc)
            return self._records_seen or []
        self._records_seen = records
        return records

    def shown_breakers(self) -> Breakers:
        """The breakers now; while the shared store is away, as last read (the status is still
        written: it is what says the store is away)."""
        try:
            breakers = Breakers.load(self.config.state_dir, self.config.policy.breaker, cluster_documents(self.config))
        except StoreUnavailable:
            if self._breakers_seen is None:
                raise
            return self._breakers_seen
        self._breakers_seen = breakers.snapshot()
        return breakers

    def shown_refusals(self) -> RefusalMemory | None:
        """The memory of refusals now; while the shared store is away, as last read (None when
        it was never read: the rest of the status still matters)."""
        try:
            memory = RefusalMemory.load(cluster_documents(self.config), self.config.policy)
        except (XceprovError, OSError) as exc:
            log.debug("refusals not read, as last read instead: %s", exc)
            return self._refusals_seen
        self._refusals_seen = memory.snapshot()
        return memory

    def _daemon_member(self, state: str) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "instance_id": self.instance_id,
            "host": socket.gethostname(),
            "state": state,
            "started": self.started,
            "passes": self.passes,
            "reconcile_interval": self.config.daemon.reconcile_interval,
            "config": str(self.lifecycle.config.source),
        }

    def rewrite_status(self, state: str) -> None:
        """The last status again with a new ``state``: no controller round trip (a stop must not
        wait for one); ``stopped``: the leases are released by now."""
        document = dict(
            self._document or {"last_pass": None, "breakers": [], "refusals": [], "open_ops": [], "instances": {}}
        )
        document["daemon"] = {**self._daemon_member(state), "written": self.options.clock()}
        if state == "stopped":
            document["leases"] = [
                {**row, "held": False, "epoch": None, "remaining": 0.0, "holder": "", "note": "released at stop"}
                for row in document.get("leases", [])
            ]
            # No play runs any more: the hosts of a stopped one are bootstrapped at the next start.
            document["bootstrap"] = {
                provider: {**counts, "waiting": counts.get("waiting", 0) + counts.get("running", 0), "running": 0}
                for provider, counts in (document.get("bootstrap") or {}).items()
            }
        document.setdefault("leases", [])
        document.setdefault("reclaim_candidates", [])
        document.setdefault("orphans", self.orphans.to_json() if self.orphans is not None else None)
        document.setdefault("notices", [])
        write_status(self.config.state_dir, document)
