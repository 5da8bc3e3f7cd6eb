"""The daemon's Prometheus metrics, in a registry of their own, and the endpoint that serves them.

A registry of its own (not ``prometheus_client.REGISTRY``): the default one also collects the
process and platform collectors of whatever imported the library, and two daemons in one test
process would share it. The endpoint is off unless ``daemon.metrics.listen`` is set; the model
(``MetricsSettings``) refuses a non-loopback address unless ``allow_remote`` says so, because the
label values name every provider and template of the site.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from orchestrator.daemon.metrics_http import DEFAULT_LIMITS, BoundedServer, ServerLimits
from orchestrator.daemon.timeouts import NamedTimeout
from orchestrator.errors import ConfigError
from orchestrator.model.config import MetricsSettings

log = logging.getLogger(__name__)

# A pass with nothing to do over 1000 hosts is well under a second; one with applies can take
# minutes (the loop waits for nothing, but the phases do).
PASS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class OpKind(StrEnum):
    """What an op does to the cloud."""

    CREATE = "create"
    RETURN = "return"


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
        r = self.registry
        self.ops = Counter("xceprov_ops", "Ops finished, by outcome", ["provider", "kind", "outcome"], registry=r)
        self.instances = Gauge(
            "xceprov_instances", "Instances of this orchestrator by state", ["provider", "state"], registry=r
        )
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
        self.unknown_values = Counter(
            "xceprov_controller_unknown_values",
            "Enum values from the controller this version does not know, skipped (label: Struct.field)",
            ["field"],
            registry=r,
        )
        self._states: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def op_finished(self, provider: str, kind: OpKind, outcome: OpOutcome) -> None:
        """Count one op that ended."""
        self.ops.labels(provider=provider, kind=kind.value, outcome=outcome.value).inc()

    def set_instances(self, provider: str, counts: Mapping[str, int]) -> None:
        """The provider's instances by state, as a whole: a state no longer present reads 0, not its old value."""
        with self._lock:
            for state in self._states.get(provider, set()) - set(counts):
                self.instances.labels(provider=provider, state=state).set(0)
            for state, count in counts.items():
                self.instances.labels(provider=provider, state=state).set(count)
            self._states[provider] = self._states.get(provider, set()) | set(counts)

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
    try:
        server = BoundedServer(host, port, make_wsgi_app(metrics.registry), limits)
    except OSError as exc:
        raise ConfigError(
            [f"{source}: daemon.metrics.listen: cannot listen on {settings.listen}: {exc.strerror or exc}"]
        ) from None
    server.start()
    endpoint = MetricsEndpoint(server=server)
    log.info("metrics served on http://%s:%d/metrics", *endpoint.address)
    return endpoint
