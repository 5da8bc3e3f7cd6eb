"""The process of ``xceprov daemon``: leases, the controller link, one executor, one reconciler, its loop.

Start: the metrics endpoint (when configured), a :class:`LeaseKeeper` for every provider (its
renewals run in a child process: in-process renewal was measured late under load, see
``clients/controller/keeper.py``; a denied lease is asked for again and again, and a pass
leaves a provider without a valid lease alone), the :class:`ControllerLink` for pushes, facts
and hosts, one executor fenced by the keeper (closed early at a stop, see ``fence.py``), its
steps guarded and its ops watched by ``guarded.py`` (:func:`guard_parts`), and the reconciler.

The loop (the main thread): a pass at start, then one on each demand push or host event
(``link.on_demand``/``on_host_event`` wake it), when a lease is gained, after a SIGHUP, and at
the latest every ``daemon.reconcile_interval``. Pushes that arrive during a pass are folded into
one next pass. A lease gained while a pass runs does not wait for it: the pass resumes that
provider at once on a thread of its own (``reconcile/beside.py``), held as work in flight
(``resume of <provider>``, ``parts.default_reconciler``) like the pass itself. After every
pass: the status file (``<state_dir>/daemon/status.json``) and the metrics (the link's state
is read at each scrape, each SIGHUP's outcome is set as it ends); a heartbeat for the
watchdog; ``READY=1`` after the first. Between two passes, the orphan scan when it is due
(``orphanscan.py``: on ``policy.orphans.interval``, and once the settle window after a new
controller term has passed; the loop watches the link's term).

With a shared store (``terraform.backend: pg``, ``sharing.py``): a heartbeat thread of its own
(``members.py``), the keeper asking only for the providers dealt to this daemon (a newly dealt
one asked for at once, one dealt away released between two passes), and a fence closed for every
provider while the store does not answer.

Stop (SIGTERM, ``lifecycle.py``): a thread of its own waits for the stop and runs
``Lifecycle.shutdown`` (in-flight work, a resume beside the pass included, is waited for up to
``daemon.stop_timeout``, then the leases are released); the loop starts no new pass, the pass
no new resume and the executor no new op.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from orchestrator.clients.controller.factreader import FactReader
from orchestrator.clients.controller.keeper import LeaseKeeper
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.reasons import report_reasons
from orchestrator.clients.controller.types import HostEvent, TemplateReason
from orchestrator.configfile import LoadedConfig
from orchestrator.daemon.fence import StopFence
from orchestrator.daemon.flightrecorder import FlightRecorder
from orchestrator.daemon.guarded import (
    NotStarted,
    PassAborted,
    StopGuard,
    guard_parts,
    guarded_bootstrap,
    guarded_decommission,
    held_unless_stopping,
    stoppable_sleep,
)
from orchestrator.daemon.lifecycle import Lifecycle, exit_process
from orchestrator.daemon.members import Membership
from orchestrator.daemon.metrics import DaemonMetrics, MetricsEndpoint, daemon_version, start_endpoint
from orchestrator.daemon.noticewatch import NoticeWatch
from orchestrator.daemon.noticing import NoticeHandling
from orchestrator.daemon.orphanscan import OrphanScans, Scanning
from orchestrator.daemon.parts import (
    DaemonOptions,
    LoopParts,
    ReconcilerFactory,
    Reconciling,
    ScannerFactory,
    default_reconciler,
    default_scanner,
)
from orchestrator.daemon.publish import StatusPublishing
from orchestrator.daemon.reasonreport import ReasonReporting
from orchestrator.daemon.sharing import ProviderSharing
from orchestrator.daemon.systemd import Heartbeat, WatchdogPinger
from orchestrator.daemon.wakeups import WakeUps
from orchestrator.daemon.warmup import warm
from orchestrator.errors import ControllerError, UsageError, XceprovError
from orchestrator.model.config import Config
from orchestrator.model.demand import DemandSnapshot
from orchestrator.ops.catalogue import CatalogueReader
from orchestrator.ops.executor import OpParts, Wired
from orchestrator.ops.facts import LinkFacts
from orchestrator.ops.hosts import LinkHosts
from orchestrator.reconcile.report import PassReport
from orchestrator.reconcile.selected import SelectedOfferings
from orchestrator.workspace.pgbackend import refuse_unmigrated
from orchestrator.workspace.terraform import engine_for

# The daemon's public face: the process, and what it is built from (``parts.py``).
__all__ = [
    "Daemon",
    "DaemonOptions",
    "LoopParts",
    "ReconcilerFactory",
    "Reconciling",
    "ScannerFactory",
    "daemon_instance_id",
    "default_reconciler",
    "default_scanner",
]

log = logging.getLogger(__name__)

# How often the loop looks at the lease keeper between passes: a lease gained (a denied one
# granted at last, one regained after a failover) starts a pass without waiting for the interval.
LEASE_POLL = 1.0
# The longest a healthy loop may go without a heartbeat beyond its interval: passes beat at
# their end and at every audited step of an op, and a single Terraform apply of a large burst
# can run for minutes without one.
PASS_ALLOWANCE = 900.0
# While the first pass runs (a resume of a large op can take minutes), systemd's start timeout is
# pushed this far ahead every EXTEND_EVERY seconds, for as long as the heartbeat says the pass
# makes progress: READY=1 comes after the first pass, and TimeoutStartSec must not kill a slow
# but working one.
EXTEND_BY = 60.0
EXTEND_EVERY = 20.0
# At start, how long the first pass waits for the link (START_WAIT), then for the leases
# (LEASE_SETTLE) before it runs anyway and skips the providers without a lease: a lease gained
# later starts a pass of its own.
START_WAIT = 15.0
LEASE_SETTLE = 3.0


def daemon_instance_id(cluster: str) -> str:
    """The instance id the daemon joins under (informational, stable per cluster and machine).

    Its leases are held by this process alone (``protocol.holder``): a restarted daemon is another
    holder and gets the leases when the stopped one released them, or after their TTL."""
    return f"{cluster}-daemon-{socket.gethostname()}"


class Daemon(WakeUps, StatusPublishing, ProviderSharing, NoticeHandling):
    """One daemon process (see the module docstring); :meth:`run` returns its exit status."""

    def __init__(self, lifecycle: Lifecycle, options: DaemonOptions) -> None:
        self.lifecycle = lifecycle
        self.options = options
        loaded = lifecycle.config
        if loaded.config.standalone:
            raise UsageError(
                f"{loaded.source}: standalone: true: the daemon follows the controller's demand and "
                "needs one; set standalone: false and configure controller.addresses"
            )
        refuse_unmigrated(loaded.config)  # a local state left behind under backend pg: migrate first
        self.config = loaded.config
        self.instance_id = daemon_instance_id(self.config.cluster)
        self.providers = sorted(self.config.providers)
        self.metrics = DaemonMetrics()
        self.heartbeat = Heartbeat(self.config.daemon.reconcile_interval + PASS_ALLOWANCE)
        self.passes = 0
        self.started = options.clock()
        self._trigger_lock = threading.Lock()
        self._trigger = ""
        self._reloaded: LoadedConfig | None = None
        # The configuration the loop's parts use (the lifecycle's, once the loop has applied it).
        self._applied = loaded
        self._held_before: dict[str, bool] = {}
        self._document: dict[str, Any] | None = None
        self._exit_code = 0
        self._stopped = threading.Event()
        self._ready = False
        self._warmed = False  # the working directories of every configured provider prepared (warmup.py)
        self.endpoint: MetricsEndpoint | None = None
        self.keeper: LeaseKeeper | None = None
        self.link: ControllerLink | None = None
        self.fact_reader: FactReader | None = None
        # The executor and the parts it is built from (the pass, the scan and a reload use both).
        self.ops: Wired | None = None
        self.guard: StopGuard | None = None
        self.reconciler: Reconciling | None = None
        self.pinger: WatchdogPinger | None = None
        self.orphans: OrphanScans | None = None
        self.membership: Membership | None = None
        self._share_applied: tuple[set[str], int] | None = None
        self._share_lock = threading.Lock()
        self._last_report: PassReport | None = None
        # Each pass's scale-out reasons: journaled, and told to the controller (reasonreport.py).
        self.reason_reports = ReasonReporting(self.config.state_dir, self._report_reasons)
        self.notice_watch: NoticeWatch | None = None
        # What the daemon saw and decided, as a recording (flightrecorder.py, docs/recording.md).
        self.recorder = FlightRecorder(
            self.config.state_dir, self.config.daemon.recording, options.clock, self.metrics.recording
        )

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Open the metrics endpoint, the leases, the link; build the executor and the reconciler."""
        config, lifecycle, options = self.config, self.lifecycle, self.options
        # Registered first, run last (on_stop runs last registered first): the final status.
        lifecycle.on_stop("final status", self._write_stopped)
        lifecycle.on_stop("flight recorder", self.recorder.close)
        self.recorder.config(config)
        self.metrics.started(daemon_version(), self.started)
        self.endpoint = start_endpoint(config.daemon.metrics, self.metrics, lifecycle.config.source)
        if self.endpoint is not None:
            lifecycle.on_stop("metrics endpoint", self.endpoint.stop)
        self.link = ControllerLink(
            config.controller, instance_id=self.instance_id, providers=self.providers, cluster=config.cluster
        )
        lifecycle.on_stop("controller link", self.link.close)
        self.fact_reader = FactReader(self.link)
        # With a shared store (terraform.backend: pg) the providers are split between the daemons
        # heartbeating in it (sharing.py): the keeper asks for its share only, from the first read.
        store = options.member_store(config)
        if store is not None:
            self.join_members(store, self.link.lease_instance, self.wake)
        # The keeper's link joins as this process's instance: the two links are one lease holder.
        self.keeper = LeaseKeeper(
            config.controller,
            instance_id=self.instance_id,
            providers=self.providers,
            cluster=config.cluster,
            lease_instance=self.link.lease_instance,
            wanted=[] if self.membership is not None else None,
        )
        lifecycle.on_stop("lease release", lambda: self.keeper.close(release=True) if self.keeper else None)
        self.keeper.start()
        self.keeper.attach(self.link)
        self.link.on_demand(self.on_demand)
        self.link.on_host_event(self.on_host_event)
        self.link.on_unknown_value(self.metrics.unknown_value)
        lifecycle.on_reload(self.on_reload)
        lifecycle.on_sighup_done(lambda taken: self.metrics.reload_finished(taken, options.clock()))
        self.metrics.watch_link(lambda: self.link is not None and self.link.state().connected)
        if self.membership is not None:
            membership = self.membership
            self.metrics.watch_store(lambda: membership.closed_reason() is None)
        self.link.start()
        if self.membership is not None:
            self.membership.start()
        engine = options.engine or engine_for(config)
        # The offerings of the select: templates, from the flavor catalogues (kept for each
        # provider's catalogue_ttl): what a create renders on; the policy's PolicyInputs.selected.
        self.selected = SelectedOfferings(CatalogueReader(config, options.toolkit_root, lambda: engine))
        parts = OpParts(
            config,
            options.toolkit_root,
            engine,
            StopFence(self.fenced(self.keeper), lifecycle.stop_window),
            LinkFacts(self.link),
            LinkHosts(self.link),
            bootstrap=None,  # the pass runs the bootstrap in its own phase (retried, counted per host)
            decommission=guarded_decommission(options.decommission, lifecycle) if options.decommission else None,
            sleep=stoppable_sleep(lifecycle),
            clock=options.clock,
            selected=self.selected.current,
        )
        # Every step recorded through the stop guard, every op watched (held in flight, counted).
        self.guard = guard_parts(parts, lifecycle, self.metrics, self.heartbeat)
        self.guard.observer = self.recorder.facts
        self.ops = Wired.of(parts)
        # The status file shows the hosts of a running play (publish.py, watched_bootstrap).
        play = self.watched_bootstrap(guarded_bootstrap(options.bootstrap, lifecycle)) if options.bootstrap else None
        self.reconciler = options.reconciler(
            LoopParts(config, self.ops, self.link, play, options.clock, lifecycle, self.fact_reader, options.first_boot)
        )
        self.orphans = OrphanScans(config, lifecycle, self.metrics, options.clock, self._scanner)
        self.start_notice_watch()  # interruption notices read on a thread of their own (noticing.py)
        if options.watchdog_interval is not None:
            self.pinger = WatchdogPinger(options.notifier, options.watchdog_interval, self.heartbeat.healthy)
            self.pinger.start()
            lifecycle.on_stop("watchdog", self.pinger.stop)
        log.info(
            "daemon %s started: providers %s, reconcile_interval %gs, state in %s",
            self.instance_id,
            ", ".join(self.providers),
            config.daemon.reconcile_interval,
            config.state_dir,
        )

    def _wait_for_leases(self) -> None:
        """Until every lease is held, or LEASE_SETTLE after the link is up (a lease another
        instance holds is not waited for: the pass skips that provider), at most START_WAIT."""
        assert self.link is not None and self.keeper is not None
        deadline = time.monotonic() + START_WAIT
        connected = self.link.wait_connected(START_WAIT)
        self.wait_for_share(deadline)  # with a shared store: the first members read deals the share
        if connected:
            # The keeper's own link connects alongside; its first answer comes within a retry.
            deadline = min(deadline, time.monotonic() + LEASE_SETTLE)
        while time.monotonic() < deadline and not self.lifecycle.stopping:
            wanted = set(self.wanted_providers())
            statuses = [s for s in self.keeper.status() if s.provider in wanted]
            if statuses and all(s.held for s in statuses):
                return
            self.lifecycle.wait_stopping(0.1)

    def _apply_reload(self) -> None:
        """A reloaded configuration into the loop's parts, between two passes (or scans).

        The lifecycle kept the restart-only keys (``restartonly.py``) and logged them. A part
        that cannot take it (it raised) gets the previous configuration back, the lifecycle too,
        and the loop goes on with it: a reload never ends the daemon.
        """
        with self._trigger_lock:
            new, self._reloaded = self._reloaded, None
        if new is None or new is self._applied:  # nothing new (a reload given back, see Lifecycle)
            return
        previous = self._applied
        try:
            self._use(new.config)
        except Exception as exc:
            log.exception(
                "SIGHUP: the configuration from %s could not be applied, keeping the previous one: %s",
                new.source,
                f"{type(exc).__name__}: {exc}".splitlines()[0],
            )
            try:
                self._use(previous.config)
            except Exception:  # logged; the loop goes on with what each part has
                log.exception("SIGHUP: the previous configuration could not be given back to every part")
            self.lifecycle.restore(previous, new)
            self.options.notifier.status(f"reload failed: {type(exc).__name__}; the previous configuration stays")
            return
        self._applied = new
        self._warmed = False  # providers added: prepared after the next pass

    def _use(self, config: Config) -> None:
        self.config = config
        assert self.ops is not None and self.reconciler is not None and self.selected is not None
        self.ops.parts.config = config
        self.selected.reload(config)
        self.reconciler.reload(config)
        if self.orphans is not None:
            self.orphans.reload(config)
        self.recorder.reload(config)

    # -- the loop ------------------------------------------------------------------------------

    def _next_trigger(self) -> str | None:
        """Wait for the next pass's reason; None once stopping."""
        deadline = time.monotonic() + self.config.daemon.reconcile_interval
        while True:
            # A due scan runs before the next pass, whatever woke the loop: pushes arriving all
            # the time must not starve it (it is due at most once per interval).
            if not self._scan_if_due() or not self.retire_reclaimed():
                return None
            self.apply_share()  # between passes: a provider dealt away is released now, not under an op
            left = deadline - time.monotonic()
            if left <= 0:
                return "interval"
            if not self.lifecycle.wait(min(left, LEASE_POLL)):
                return None
            trigger = self.take_trigger()
            if trigger:
                return trigger
            if self.lease_gained():
                return "lease"

    def _scanner(self, config: Config) -> Scanning:
        assert self.ops is not None and self.guard is not None and self.link is not None
        # The scan's gates are its own, as a pass's are (no op of the last pass counts as in flight).
        self.guard.new_pass()
        return self.options.orphan_scanner(
            LoopParts(config, self.ops, self.link, None, self.options.clock, self.lifecycle)
        )

    def _watch_term(self) -> None:
        """A new term on the link (a failover or a controller restart): ask when it started."""
        assert self.link is not None and self.orphans is not None
        term = self.link.state().term
        if term <= 0 or term == self.orphans.timer.term:
            return
        try:
            started = self.link.query_status().term_started
        except (XceprovError, OSError) as exc:  # away, or a controller that does not serve it
            log.debug("term %d: its start is not known (%s): counted from now", term, exc)
            started = 0.0
        self.orphans.observe_term(term, started)

    def _scan_if_due(self) -> bool:
        """The orphan scan when it is due, then the status file; False once stopping."""
        if self.orphans is None or self.lifecycle.stopping:
            return not self.lifecycle.stopping
        self._watch_term()
        trigger = self.orphans.due()
        if trigger is None:
            return True
        self._apply_reload()  # a scan, like a pass, never sees its configuration change under it
        if not self.orphans.run(trigger):
            return False
        self.heartbeat.beat()
        self.publish_status(self._last_report, None)
        return not self.lifecycle.stopping

    def run_pass(self, trigger: str) -> bool:
        """One pass, its status file and metrics; False when the stop refused it."""
        assert self.reconciler is not None
        try:
            with held_unless_stopping(self.lifecycle, f"reconcile pass ({trigger})"):
                self._apply_reload()
                assert self.guard is not None
                self.guard.new_pass()
                began = time.monotonic()
                report: PassReport | None = None
                try:
                    report = self.reconciler.run_once(trigger)
                except PassAborted as exc:
                    log.info("reconcile pass (%s) ended early: %s", trigger, exc)
                    return False
                except Exception:  # the pass isolates its phases; this is a bug in the loop itself
                    log.exception("reconcile pass (%s) failed", trigger)
                duration = time.monotonic() - began
        except NotStarted:
            return False
        self.passes += 1
        self.heartbeat.beat()
        self._last_report = report
        self.publish_status(report, duration)
        if report is not None:
            self.reason_reports.after_pass(report, self.options.clock())
            self.recorder.after_pass(report)
        self.recorder.notices((self._document or {}).get("notices") or [])
        return True

    def on_demand(self, snapshot: DemandSnapshot) -> None:
        """A demand push: recorded, then a pass."""
        self.recorder.demand(snapshot)
        super().on_demand(snapshot)

    def on_host_event(self, event: HostEvent) -> None:
        """A host event: recorded, then a pass."""
        self.recorder.host_event(event)
        super().on_host_event(event)

    def _report_reasons(self, reasons: Sequence[TemplateReason], now: float) -> None:
        if self.link is None:
            raise ControllerError("no controller link yet")
        report_reasons(self.link, reasons, now)

    def _write_stopped(self) -> None:
        self.rewrite_status("stopped")

    def _stop_when_asked(self) -> None:
        self.lifecycle.wait_stopping()
        try:
            self.rewrite_status("stopping")
        except Exception:  # the stop goes on without it
            log.exception("daemon status not written")
        self._exit_code = self.lifecycle.shutdown()
        self._stopped.set()
        if self._exit_code != 0:
            # Work is still running past the bound (the loop is inside it): exit without it.
            exit_process(self._exit_code)

    def _extend_start(self) -> None:
        """Until READY=1: more start time from systemd while the first pass works (see EXTEND_BY)."""
        while not self._ready and not self.lifecycle.stopping:
            if self.heartbeat.healthy():
                self.options.notifier.extend_timeout(EXTEND_BY)
            self.lifecycle.wait_stopping(EXTEND_EVERY)

    def run(self) -> int:
        """Start, loop until a stop, and give the exit status (0: stopped cleanly within the bound)."""
        stopper = threading.Thread(target=self._stop_when_asked, name="daemon-stop", daemon=True)
        stopper.start()
        if self.options.notifier.enabled:
            threading.Thread(target=self._extend_start, name="daemon-start-extend", daemon=True).start()
        try:
            self.start()
            self._wait_for_leases()
            self._held_before = {s.provider: s.held for s in self.keeper.status()} if self.keeper else {}
            trigger: str | None = "start"
            while trigger is not None and self.run_pass(trigger):
                if not self._ready:
                    self._ready = True
                    self.lifecycle.started()
                    self.options.notifier.ready(f"first pass done; leases held for {self._held_summary()}")
                self._warm_workdirs()
                trigger = self._next_trigger()
        except BaseException:
            # A start that failed (metrics address taken, a bug): release what was taken.
            self.lifecycle.request_stop("start failed")
            self._stopped.wait()
            raise
        if not self.lifecycle.stopping:  # a signal ended the loop: the usual case
            self.lifecycle.request_stop("loop ended")
        self._stopped.wait()
        return self._exit_code

    def _warm_workdirs(self) -> None:
        """With a shared store, once after the first pass and after each reload: the working
        directories of every configured provider prepared, so a takeover starts without init."""
        if self.membership is None or self._warmed or self.ops is None or self.lifecycle.stopping:
            return
        self._warmed = True
        warm(self.ops.executor, self.config.providers)

    def _held_summary(self) -> str:
        rows = (self._document or {}).get("leases", [])
        held = [row["provider"] for row in rows if row["held"]]
        return ", ".join(held) or "no provider yet"
