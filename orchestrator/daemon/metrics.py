"""The daemon's Prometheus metrics, in a registry of their own, and the endpoint that serves them.

A registry of its own (not ``prometheus_client.REGISTRY``): the default one also collects the
platform and GC collectors of whatever imported the library, and two daemons in one test
process would share it; the process collector (CPU, memory, open files, start time) is added to
it explicitly. No ``_created`` series: they double every counter and histogram and a scraper
that does not ask for OpenMetrics has no use for them. The endpoint is off unless
``daemon.metrics.listen`` is set; the model (``MetricsSettings``) refuses a non-loopback address
unless ``allow_remote`` says so, because the label values name every provider and template of
the site; ``tls_cert``/``tls_key`` serve it over TLS and ``tls_client_ca`` asks every scraper
for a certificate signed by that CA (``metrics_http.tls_context``).
"""

from __future__ import annotations

import importlib.metadata
import logging
import re
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    make_wsgi_app,
)

from orchestrator.daemon.flightrecorder import RecordingMetrics
from orchestrator.daemon.metrics_http import DEFAULT_LIMITS, BoundedServer, ServerLimits
from orchestrator.daemon.refusalmetrics import RefusalMetrics
from orchestrator.daemon.spendmetrics import SpendMetrics
from orchestrator.daemon.timeouts import NamedTimeout
from orchestrator.errors import ConfigError
from orchestrator.model.config import MetricsSettings

log = logging.getLogger(__name__)

# A pass with nothing to do over 1000 hosts is well under a second; one with applies can take
# minutes (the loop waits for nothing, but the phases do).
PASS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# An op is one Terraform apply (a few seconds on the simulated cloud, minutes on a real one, up
# to launch_timeout); a bootstrap play runs its batch for minutes on a slow image.
OP_BUCKETS = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
BOOTSTRAP_BUCKETS = (5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)


class OpKind(StrEnum):
    """What an op does to the cloud."""

    CREATE = "create"
    RETURN = "return"
    START = "start"  # warm-pool instances started (docs/daemon.md, "The warm pool")


class OpOutcome(StrEnum):
    """How an op ended (``parked``: stopped resumable by a lost lease or a SIGTERM)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PARKED = "parked"


@dataclass
class DaemonMetrics:
    """Every metric the daemon exports; methods take typed values so label sets stay small."""

    registry: CollectorRegistry = field(default_factory=lambda: CollectorRegistry(auto_describe=True))

    def __post_init__(self) -> None:
        # Process-wide in the library (a flag read at every collection): the daemon owns its process.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # the library leaves it unannotated
        r = self.registry
        ProcessCollector(registry=r)
        self.build_info = Gauge(
            "xceprov_build_info", "Always 1; the label names the running version", ["version"], registry=r
        )
        self.link_up = Gauge("xceprov_controller_link_up", "1 while the controller link is connected", registry=r)
        self.reload_ok = Gauge(
            "xceprov_config_last_reload_successful",
            "1 when the last configuration load (start or SIGHUP) was taken, 0 when it was refused",
            registry=r,
        )
        self.reload_time = Gauge(
            "xceprov_config_last_reload_timestamp_seconds",
            "Wall-clock time of the last configuration load (start or SIGHUP), taken or refused",
            registry=r,
        )
        self.demand = Gauge(
            "xceprov_template_demand",
            "Hosts the controller wants for the template (last pass)",
            ["template"],
            registry=r,
        )
        self.in_flight = Gauge(
            "xceprov_template_in_flight",
            "Hosts on their way for the template: the controller's in flight and those only the facts know",
            ["template"],
            registry=r,
        )
        self.gap = Gauge(
            "xceprov_template_gap",
            "Hosts still to ask for: demand minus in flight, never below 0",
            ["template"],
            registry=r,
        )
        self.phase_failures = Counter(
            "xceprov_reconcile_phase_failures",
            "Reconcile phases that failed (a phase skipped after a failed read is not counted)",
            ["phase"],
            registry=r,
        )
        self.ops = Counter("xceprov_ops", "Ops finished, by outcome", ["provider", "kind", "outcome"], registry=r)
        self.bootstrap_hosts = Gauge(
            "xceprov_bootstrap_hosts",
            "Created instances by bootstrap state (waiting, running, done, failed)",
            ["provider", "state"],
            registry=r,
        )
        self.first_boot_hosts = Gauge(
            "xceprov_first_boot_hosts",
            "First-boot hosts by outcome (no-result, unreadable, started, failed, joined)",
            ["provider", "outcome"],
            registry=r,
        )
        self.first_boot_failures = Counter(
            "xceprov_first_boot_failures",
            "First-boot hosts returned because their console said the boot failed, by failed step",
            ["provider", "step"],
            registry=r,
        )
        self.instances = Gauge(
            "xceprov_instances", "Instances of this orchestrator by state", ["provider", "state"], registry=r
        )
        self.op_duration = Histogram(
            "xceprov_op_duration_seconds",
            "Duration of ops that ended, by outcome",
            ["provider", "kind", "outcome"],
            buckets=OP_BUCKETS,
            registry=r,
        )
        self.bootstrap_duration = Histogram(
            "xceprov_bootstrap_duration_seconds",
            "Duration of the bootstrap play of each host, by the host's outcome (ok, failed, stopped)",
            ["provider", "outcome"],
            buckets=BOOTSTRAP_BUCKETS,
            registry=r,
        )
        self.cost = Gauge(
            "xceprov_cost_per_hour",
            "Cost per hour of this orchestrator's instances not gone, as the budgets count them",
            ["provider", "template"],
            registry=r,
        )
        self.pool = Gauge(
            "xceprov_warm_pool_instances",
            "Warm-pool instances waiting stopped for the template on the provider",
            ["provider", "template"],
            registry=r,
        )
        self.pool_target = Gauge(
            "xceprov_warm_pool_target",
            "The template's warm_pool on the provider",
            ["provider", "template"],
            registry=r,
        )
        self.provider_budget = Gauge(
            "xceprov_provider_budget_per_hour",
            "The provider's budget_per_hour (no series when it has none)",
            ["provider"],
            registry=r,
        )
        self.cluster_budget = Gauge(
            "xceprov_cluster_budget_per_hour",
            "policy.budget_per_hour of the cluster (no series when unset)",
            ["cluster"],
            registry=r,
        )
        self.backoff = Gauge(
            "xceprov_provider_backoff",
            "1 while the provider is passed over for the template after failures (template *: every template)",
            ["provider", "template"],
            registry=r,
        )
        self.interval = Gauge("xceprov_reconcile_interval_seconds", "daemon.reconcile_interval in force", registry=r)
        self.lease_valid = Gauge(
            "xceprov_lease_valid", "1 while the provider's lease is valid", ["provider"], registry=r
        )
        self.lease_remaining = Gauge(
            "xceprov_lease_remaining_seconds",
            "Time left until the lease deadline (0 when not valid)",
            ["provider"],
            registry=r,
        )
        self.last_pass = Gauge(
            "xceprov_reconcile_last_pass_timestamp_seconds", "Wall-clock end of the last reconcile pass", registry=r
        )
        self.pass_duration = Histogram(
            "xceprov_reconcile_pass_duration_seconds", "Duration of reconcile passes", buckets=PASS_BUCKETS, registry=r
        )
        self.breaker_open = Gauge(
            "xceprov_breaker_open", "1 while the template's circuit breaker is open", ["template"], registry=r
        )
        self.timeouts = Counter(
            "xceprov_timeouts_expired",
            "Named timeouts that passed (label: the configuration key)",
            ["provider", "timeout"],
            registry=r,
        )
        self.orphan_findings = Gauge(
            "xceprov_orphan_findings",
            "Findings of the last orphan scan, by class (a, b, c, d)",
            ["provider", "class"],
            registry=r,
        )
        self.orphan_actions = Counter(
            "xceprov_orphan_actions",
            "Orphan findings' actions decided by the daemon's scans, by outcome (each scan counts its findings)",
            ["provider", "action", "outcome"],
            registry=r,
        )
        self.orphan_scans = Counter(
            "xceprov_orphan_scans", "Orphan scans the daemon ran, by result (ok, failed)", ["result"], registry=r
        )
        self.orphan_last_scan = Gauge(
            "xceprov_orphan_last_scan_timestamp_seconds", "Wall-clock end of the last orphan scan", registry=r
        )
        self.scale_out_reasons = Counter(
            "xceprov_scale_out_reasons",
            "Scale-out reasons per pass, by template and reason code (docs/daemon.md, Why nothing launched)",
            ["template", "code"],
            registry=r,
        )
        self.unknown_values = Counter(
            "xceprov_controller_unknown_values",
            "Enum values from the controller this version does not know, skipped (label: Struct.field)",
            ["field"],
            registry=r,
        )
        self.refusals = RefusalMetrics(r)  # the memory of refusals (refusalmetrics.py)
        self.spend = SpendMetrics(r)  # what bursting costs (spendmetrics.py)
        self.recording = RecordingMetrics(r)  # the flight recorder (flightrecorder.py)
        self._states: dict[str, set[str]] = {}
        self._templates: set[str] = set()
        self._costs: set[tuple[str, str]] = set()
        self._pools: set[tuple[str, str]] = set()
        self._blocks: set[tuple[str, str]] = set()
        self._budgets: tuple[set[str], set[str]] = (set(), set())
        self._lock = threading.Lock()

    def started(self, version: str, at: float) -> None:
        """The daemon started with ``version`` and a configuration loaded at wall-clock ``at``."""
        self.build_info.labels(version=version).set(1)
        self.reload_finished(True, at)

    def watch_link(self, connected: Callable[[], bool]) -> None:
        """``xceprov_controller_link_up`` reads ``connected()`` at every scrape (0 until this is called)."""
        self.link_up.set_function(lambda: 1.0 if connected() else 0.0)

    def watch_store(self, answering: Callable[[], bool]) -> None:
        """``xceprov_shared_store_up`` reads ``answering()`` at every scrape; registered only by a
        daemon with a shared store (with ``terraform.backend: local`` there is no such series)."""
        gauge = Gauge(
            "xceprov_shared_store_up",
            "1 while the shared store answers the daemon's heartbeat (0: every provider's fence is closed)",
            registry=self.registry,
        )
        gauge.set_function(lambda: 1.0 if answering() else 0.0)

    def reload_finished(self, taken: bool, at: float) -> None:
        """A configuration load ended at wall-clock ``at``: ``taken``, or refused (the last good one stays)."""
        self.reload_ok.set(1 if taken else 0)
        self.reload_time.set(at)

    def set_templates(self, rows: Mapping[str, tuple[int, int, int]]) -> None:
        """``(demand, in flight, gap)`` of every template, as a whole: one no longer named reads 0."""
        with self._lock:
            for template in self._templates - set(rows):
                for gauge in (self.demand, self.in_flight, self.gap):
                    gauge.labels(template=template).set(0)
            for template, (demand, in_flight, gap) in rows.items():
                self.demand.labels(template=template).set(demand)
                self.in_flight.labels(template=template).set(in_flight)
                self.gap.labels(template=template).set(gap)
            self._templates |= set(rows)

    def phases_ran(self, phases: Iterable[tuple[str, bool]]) -> None:
        """Each ``(phase, failed)`` of a pass: a failure counts one; every phase's series exists from its first pass."""
        for phase, failed in phases:
            child = self.phase_failures.labels(phase=phase)
            if failed:
                child.inc()

    def op_finished(self, provider: str, kind: OpKind, outcome: OpOutcome, duration_s: float) -> None:
        """Count one op that ended after ``duration_s``."""
        self.ops.labels(provider=provider, kind=kind.value, outcome=outcome.value).inc()
        self.op_duration.labels(provider=provider, kind=kind.value, outcome=outcome.value).observe(duration_s)

    def bootstrap_played(self, provider: str, outcomes: Iterable[str], duration_s: float) -> None:
        """A bootstrap play of ``provider`` ended after ``duration_s``: one observation per host,
        labelled by the first word of its outcome line (``ok``, ``failed: ...``, ``stopped: ...``)."""
        for line in outcomes:
            outcome = line.split(":", 1)[0].strip() or "failed"
            self.bootstrap_duration.labels(provider=provider, outcome=outcome).observe(duration_s)

    def set_costs(self, costs: Mapping[tuple[str, str], float]) -> None:
        """Cost per hour per ``(provider, template)``, as a whole: a pair no longer named reads 0."""
        with self._lock:
            for provider, template in self._costs - set(costs):
                self.cost.labels(provider=provider, template=template).set(0)
            for (provider, template), cost in costs.items():
                self.cost.labels(provider=provider, template=template).set(cost)
            self._costs |= set(costs)

    def set_pools(self, sizes: Mapping[tuple[str, str], tuple[int, int]]) -> None:
        """``(stopped, target)`` per ``(provider, template)`` pool, as a whole: a pool no longer named reads 0."""
        with self._lock:
            for provider, template in self._pools - set(sizes):
                self.pool.labels(provider=provider, template=template).set(0)
                self.pool_target.labels(provider=provider, template=template).set(0)
            for (provider, template), (stopped, want) in sizes.items():
                self.pool.labels(provider=provider, template=template).set(stopped)
                self.pool_target.labels(provider=provider, template=template).set(want)
            self._pools |= set(sizes)

    def set_budgets(self, cluster: str, cluster_budget: float | None, providers: Mapping[str, float | None]) -> None:
        """The budgets in force; one removed at a reload loses its series (no budget is no cap, not 0)."""
        with self._lock:
            old_clusters, old_providers = self._budgets
            clusters = {cluster} if cluster_budget is not None else set()
            named = {p for p, budget in providers.items() if budget is not None}
            for gone in old_clusters - clusters:
                self.cluster_budget.remove(gone)
            for gone in old_providers - named:
                self.provider_budget.remove(gone)
            if cluster_budget is not None:
                self.cluster_budget.labels(cluster=cluster).set(cluster_budget)
            for provider in named:
                self.provider_budget.labels(provider=provider).set(providers[provider] or 0.0)
            self._budgets = (clusters, named)

    def set_backoff(self, pairs: Iterable[tuple[str, str]], blocked: Iterable[tuple[str, str]]) -> None:
        """Every ``(provider, template)`` of ``pairs`` reads 0, those ``blocked`` 1; a block that ended reads 0."""
        blocked = set(blocked)
        with self._lock:
            for provider, template in self._blocks | set(pairs) | blocked:
                value = 1 if (provider, template) in blocked else 0
                self.backoff.labels(provider=provider, template=template).set(value)
            self._blocks |= blocked

    def set_interval(self, seconds: float) -> None:
        """``daemon.reconcile_interval`` in force (the alert on a daemon that stopped passing reads it)."""
        self.interval.set(seconds)

    def set_instances(self, provider: str, counts: Mapping[str, int]) -> None:
        """The provider's instances by state, as a whole: a state no longer present reads 0, not its old value."""
        with self._lock:
            for state in self._states.get(provider, set()) - set(counts):
                self.instances.labels(provider=provider, state=state).set(0)
            for state, count in counts.items():
                self.instances.labels(provider=provider, state=state).set(count)
            self._states[provider] = self._states.get(provider, set()) | set(counts)

    def set_bootstrap(self, provider: str, counts: Mapping[str, int]) -> None:
        """The provider's created instances by bootstrap state (every state named, 0 when none)."""
        for state, count in counts.items():
            self.bootstrap_hosts.labels(provider=provider, state=state).set(count)

    def set_first_boot(self, provider: str, counts: Mapping[str, int]) -> None:
        """The provider's first-boot hosts by outcome (every outcome named, 0 when none)."""
        for outcome, count in counts.items():
            self.first_boot_hosts.labels(provider=provider, outcome=outcome).set(count)

    def reason_seen(self, template: str, code: str) -> None:
        """Count one reason of one pass (``xceprov_scale_out_reasons_total``)."""
        self.scale_out_reasons.labels(template=template, code=code).inc()

    def first_boot_failed(self, provider: str, step: str) -> None:
        """Count one first-boot host returned after its boot failed at ``step``."""
        self.first_boot_failures.labels(provider=provider, step=step).inc()

    def set_lease(self, provider: str, valid: bool, remaining_s: float) -> None:
        """Lease state of a provider; the remaining validity is never shown below 0 or while invalid."""
        self.lease_valid.labels(provider=provider).set(1 if valid else 0)
        self.lease_remaining.labels(provider=provider).set(max(0.0, remaining_s) if valid else 0.0)

    def pass_finished(self, ended_at: float, duration_s: float) -> None:
        """One reconcile pass ended at wall-clock ``ended_at`` after ``duration_s``."""
        self.last_pass.set(ended_at)
        self.pass_duration.observe(duration_s)

    def set_breaker(self, template: str, is_open: bool) -> None:
        """Whether the template's circuit breaker is open (no more requests for it)."""
        self.breaker_open.labels(template=template).set(1 if is_open else 0)

    def orphan_scan(
        self,
        ended_at: float,
        findings: Mapping[str, Mapping[str, int]] | None,
        actions: Iterable[tuple[str, str, str]] = (),
    ) -> None:
        """One orphan scan ended: ``findings`` per provider and class (None: the scan failed, the
        gauges keep the last good scan's), ``actions`` one ``(provider, action, outcome)`` each."""
        self.orphan_scans.labels(result="ok" if findings is not None else "failed").inc()
        self.orphan_last_scan.set(ended_at)
        for provider, counts in (findings or {}).items():
            for cls, count in counts.items():
                self.orphan_findings.labels(provider=provider, **{"class": cls}).set(count)
        for provider, action, outcome in actions:
            self.orphan_actions.labels(provider=provider, action=action, outcome=outcome).inc()

    def unknown_value(self, field: str, count: int) -> None:
        """Count ``count`` values of ``field`` (``Fact.kind``, ``HostInfo.state``, ...) the link skipped."""
        self.unknown_values.labels(field=field).inc(count)

    def timeout_passed(self, provider: str, timeout: NamedTimeout) -> None:
        """Count a named timeout that passed (``join_deadline``, ``drain_timeout``, ...)."""
        self.timeouts.labels(provider=provider, timeout=timeout.value).inc()


def daemon_version() -> str:
    """The installed version of the toolkit (``xceprov_build_info``); ``unknown`` when not installed."""
    try:
        return importlib.metadata.version("xce-provisioner")
    except importlib.metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


@dataclass
class MetricsEndpoint:
    """The HTTP endpoint serving one registry (bounded: ``metrics_http``); ``stop()`` closes its socket."""

    server: BoundedServer

    @property
    def address(self) -> tuple[str, int]:
        """The address actually bound (the port is the real one when 0 was asked for)."""
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def stop(self) -> None:
        """Stop serving and close the listening socket and every connection."""
        self.server.stop()


def tls_context(settings: MetricsSettings, source: str) -> ssl.SSLContext | None:
    """The server side of TLS for the endpoint, None without ``tls_cert``; ConfigError naming the
    key whose file cannot be read or used.

    With ``tls_client_ca``, a scraper without a certificate signed by it is
    refused in the handshake (it never sees a metric)."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None

    def refused(key: str, exc: Exception) -> ConfigError:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return ConfigError([f"{source}: daemon.metrics.{key}: cannot be used: {reason}"])

    for key, path in (("tls_cert", settings.tls_cert), ("tls_key", settings.tls_key)):
        try:
            path.read_bytes()  # names the file that is missing or unreadable, which ssl does not
        except OSError as exc:
            raise refused(key, exc) from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2  # as the default of this Python; said, not assumed
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except (OSError, ssl.SSLError) as exc:
        detail = re.sub(r"\s*\(_ssl\.c:\d+\)", "", exc.strerror or str(exc))  # not the C source line
        raise refused("tls_cert", ValueError(f"not a certificate with its private key in tls_key ({detail})")) from None
    if settings.tls_client_ca is not None:
        try:
            context.load_verify_locations(cafile=settings.tls_client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise refused("tls_client_ca", exc) from None
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def start_endpoint(
    settings: MetricsSettings, metrics: DaemonMetrics, source: str, limits: ServerLimits = DEFAULT_LIMITS
) -> MetricsEndpoint | None:
    """Serve ``metrics`` where ``settings.listen`` says, within ``limits``; None (and no socket)
    when it is unset.

    ``source`` names the configuration file in the one-line error when the address cannot be bound.
    """
    address = settings.address()
    if address is None:
        return None
    host, port = address
    context = tls_context(settings, source)
    try:
        server = BoundedServer(host, port, make_wsgi_app(metrics.registry), limits, context)
    except OSError as exc:
        raise ConfigError(
            [f"{source}: daemon.metrics.listen: cannot listen on {settings.listen}: {exc.strerror or exc}"]
        ) from None
    server.start()
    endpoint = MetricsEndpoint(server=server)
    scheme = "https" if context is not None else "http"
    log.info("metrics served on %s://%s:%d/metrics", scheme, *endpoint.address)
    return endpoint
