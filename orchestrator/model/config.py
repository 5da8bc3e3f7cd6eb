"""The site configuration (``xceprov.yaml``) as one typed schema.

Unknown keys are refused everywhere (``extra="forbid"``) so that a misspelt key is an error
with a suggestion instead of a silently ignored setting. Cross-references (a template naming a
provider that does not exist) are checked after the fields, so every problem is reported at once.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from orchestrator.model.durations import Duration
from orchestrator.model.modules import provider_module
from orchestrator.model.provider_mirror import ProviderMirror
from orchestrator.model.strict import Strict
from orchestrator.model.templateconfig import (
    HostTemplate,
    TemplateOnProvider,
)

NAME_PATTERN = r"^[a-z][a-z0-9_-]{0,39}$"
SHARD_SIZE = 250  # instances per Terraform state (providers.<name>.shard_size); see docs/performance.md
SYSTEM_TRUST = "system"  # ``controller.ca: system``: trust the system store, said explicitly


class TerraformSettings(Strict):
    """Which Terraform engine runs plans and applies."""

    engine: Literal["bundled", "binary"] = "bundled"
    binary: str | None = Field(default=None, description="terraform or tofu executable when engine=binary")
    parallelism: int = Field(default=10, ge=1, le=256)
    # Shards (Terraform states) of one op applied at the same time. 2 measured best on 2 cores:
    # every state at once only adds contention between provider processes (docs/performance.md).
    parallel_states: int = Field(default=2, ge=1, le=64)
    # The bundled engine starts this project's Python providers (the simulated cloud's) once per
    # command and attaches Terraform to them, instead of Terraform launching them for every walk
    # of the command (a plan: three launches, 0.4 s each). Off: Terraform launches them itself.
    attach_providers: bool = True
    # Where every provider but the toolkit's own comes from (docs/configuration.md); unset: Terraform's registries.
    provider_mirror: ProviderMirror | None = None
    # Where Terraform keeps each shard's state: a local file in the working directory, or
    # Terraform's own ``pg`` backend (one schema per cluster × provider × shard), shared by
    # several orchestrators (docs/scale-out.md). The connection string is never in this file:
    # ``PG_CONN_STR`` in the environment, else the file ``pg_conn_file`` names.
    backend: Literal["local", "pg"] = "local"
    pg_conn_file: Path | None = Field(default=None, description="file or credential:NAME with the connection string")

    @model_validator(mode="after")
    def _binary_named(self) -> TerraformSettings:
        if self.engine == "binary" and not self.binary:
            raise ValueError("engine 'binary' needs 'binary' (path or name of terraform or tofu)")
        return self


class ControllerSettings(Strict):
    """How to reach the XCE controller (used by the controller link)."""

    addresses: list[str] = Field(default_factory=lambda: ["127.0.0.1:7441"])
    # What provisioned hosts use to reach the controller (written into their node manager
    # configuration); defaults to ``addresses`` when empty.
    worker_addresses: list[str] = Field(default_factory=list)
    # The CA that signed the controller's certificate. A configuration file must name it or say
    # ``system`` (checked by ``configfile``); ``system`` is held as None, which is what the TLS
    # helpers take as "the system trust store".
    ca: Path | None = None
    client_cert: Path | None = None
    client_key: Path | None = None
    # The worker join key the controller issued (hex text): the bootstrap mints each host's join
    # token with it (docs/protocol.md, "Authentication and roles").
    join_key: Path | None = None
    server_name: str | None = None
    max_frame_bytes: int = Field(default=4 * 1024 * 1024, ge=1024, le=1 << 30)
    # The most facts one read of a provider's facts may take (docs/protocol.md, "Limits"): a bound
    # against a controller that pages without end, sized far above an honest fact log.
    max_facts_per_read: int = Field(default=1_000_000, ge=1000)
    # A zero timeout would fail every connection and request before it could start.
    connect_timeout: Duration = Field(default=5.0, gt=0)
    request_timeout: Duration = Field(default=10.0, gt=0)
    lease_margin: Duration = 2.0

    @field_validator("ca", mode="before")
    @classmethod
    def _system_trust(cls, value: object) -> object:
        return None if value == SYSTEM_TRUST else value

    @model_validator(mode="after")
    def _client_pair(self) -> ControllerSettings:
        # A certificate without its key (or a key without its certificate) would silently
        # connect without a client identity.
        if (self.client_cert is None) != (self.client_key is None):
            given, missing = ("client_cert", "client_key") if self.client_key is None else ("client_key", "client_cert")
            raise ValueError(f"{given} is set but {missing} is not: give both or neither")
        return self


class AnsibleSettings(Strict):
    """How bootstrap plays reach provisioned hosts."""

    ssh_user: str = "root"
    ssh_key: Path | None = None
    forks: int = Field(default=20, ge=1, le=500)
    timeout: Duration = Field(default=600.0, gt=0)
    site_dir: Path | None = None
    host_key_policy: Literal["record", "strict"] = "record"
    # How long the bootstrap looks for host keys an instance published on its console before it
    # scans (record) or gives up on the host (strict); 0 never reads published keys. Unset: the
    # same bound as the wait for SSH (timeout / 2), so the whole key step stays within it and a
    # world without hosts fails its bootstrap as soon as before (a stop is not held longer).
    host_key_publish_wait: Duration | None = Field(default=None, ge=0)
    keep_artifacts: int = Field(default=20, ge=1)
    # How plays run on the hosts: Mitogen's linear strategy (one Python per host for the whole
    # play, modules cached there) or Ansible's own linear strategy over ssh (docs/bootstrap.md).
    strategy: Literal["mitogen_linear", "linear"] = "mitogen_linear"


class SimSettings(Strict):
    """The embedded simulated world (controller, cloud, hosts)."""

    state_dir: Path | None = None


# What the orphan scan does with a class (b) object matching no live host (docs/configuration.md).
OrphanAction = Literal["report", "terminate"]

# Shortest max_lifetime accepted: the in-host shutdown of aws/openstack is scheduled in minutes.
MIN_MAX_LIFETIME = 60


class ProviderSettings(Strict):
    """One place hosts come from."""

    module: str = Field(pattern=NAME_PATTERN)
    priority: int = 10
    max_instances: int = Field(default=50, ge=1)
    granularity: int = Field(default=1, ge=1)
    lead_time: Duration = 120.0
    hold_time: Duration = 600.0
    idle_time: Duration = 300.0
    # Zero would declare every host lost the moment it is created.
    join_deadline: Duration = Field(default=900.0, gt=0)
    # The cloud backstop (docs/configuration.md): every instance carries it as the owner tag
    # xce:max_lifetime and the cloud (or, on EC2, the host's own shutdown) ends the instance
    # that long after launch, whatever the orchestrator knows. Off by default: it ends hosts
    # whether or not they run work, so only the site can choose a value longer than its jobs.
    max_lifetime: Duration | None = None
    # Terraform rewrites a whole state after every instance it applies, so one state's apply
    # grows with the square of its size; the provider's instances are spread over working
    # directories of at most this many (docs/architecture.md, "Bursts that scale").
    shard_size: int = Field(default=SHARD_SIZE, ge=1, le=10_000)
    # How long a return waits for a closed (draining) host to finish its work, and what happens
    # then: ``wait`` keeps waiting (the return stays open, resumable), ``return`` returns anyway.
    drain_timeout: Duration = 3600.0
    drain_policy: Literal["wait", "return"] = "wait"
    tags: dict[str, str] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    # Daemon policy (docs/configuration.md, "Scale-out policy"): the most this provider's live
    # and in-flight instances may cost per hour (sum of their templates' cost_per_hour); unset = no cap.
    budget_per_hour: float | None = Field(default=None, ge=0)
    # The orphan scan's per-provider overrides of policy.orphans.action and .grace (unset: those).
    orphan_action: OrphanAction | None = None
    orphan_grace: Duration | None = None
    # How long a read of the provider's flavor catalogue is used before it is read again (the
    # templates' select:, docs/configuration.md "Selecting flavors from the catalogue").
    catalogue_ttl: Duration = Field(default=3600.0, gt=0)

    @model_validator(mode="after")
    def _lifetime_fits(self) -> ProviderSettings:
        lifetime = self.max_lifetime
        if lifetime is None:
            return self
        if lifetime != int(lifetime) or lifetime < MIN_MAX_LIFETIME:
            raise ValueError(
                f"max_lifetime {lifetime:g}s must be whole seconds, at least {MIN_MAX_LIFETIME}s "
                "(the in-host shutdown counts in minutes)"
            )
        if lifetime <= self.join_deadline:
            # The cloud would end every host before the controller could judge whether it joined.
            raise ValueError(f"max_lifetime {lifetime:g}s must be longer than join_deadline {self.join_deadline:g}s")
        return self

    def max_lifetime_seconds(self) -> int | None:
        """``max_lifetime`` as whole seconds (the ``xce:max_lifetime`` tag value), None when off."""
        return None if self.max_lifetime is None else int(self.max_lifetime)

    def module_settings(self) -> dict[str, Any]:
        """``settings`` over the module's defaults (templates such as ``{{ sim_state_dir }}`` unrendered)."""
        # Settings a module gets unless the site says otherwise (its registry entry).
        entry = provider_module(self.module)
        return {**(entry.default_settings if entry else {}), **self.settings}


# The SIGTERM bound (daemon.stop_timeout): in-flight work gets this long to finish or park
# resumable. contrib/systemd/xceprov.service's TimeoutStopSec is this plus a margin.
STOP_TIMEOUT = 90.0
RECONCILE_INTERVAL = 30.0


class MetricsSettings(Strict):
    """The Prometheus endpoint of the daemon: off unless ``listen`` is set."""

    # The metrics name every provider and template of the site: a non-loopback address must be
    # asked for explicitly. Declared before ``listen`` so that its check can read it.
    allow_remote: bool = False
    # host:port ("127.0.0.1:9477", "[::1]:9477"); port 0 takes any free port (logged at start).
    listen: str | None = None
    # TLS for the endpoint (PEM files): certificate and key together; with a client CA, a scraper
    # must present a certificate signed by it.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None

    @field_validator("listen")
    @classmethod
    def _address(cls, listen: str | None, info: ValidationInfo) -> str | None:
        if listen is None:
            return None
        host, _port = split_listen(listen)  # ValueError names the problem
        if not info.data.get("allow_remote", False) and not is_loopback(host):
            raise ValueError(
                "not a loopback address; the metrics name every provider and template: "
                "set daemon.metrics.allow_remote: true to serve them beyond this machine"
            )
        return listen

    @model_validator(mode="after")
    def _tls_pair(self) -> MetricsSettings:
        # Half a TLS setting would serve the metrics in clear text without saying so.
        if (self.tls_cert is None) != (self.tls_key is None):
            given, missing = ("tls_cert", "tls_key") if self.tls_key is None else ("tls_key", "tls_cert")
            raise ValueError(f"{given} is set but {missing} is not: give both or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("tls_client_ca is set but tls_cert and tls_key are not: client certificates need TLS")
        return self

    def address(self) -> tuple[str, int] | None:
        """``(host, port)`` to bind, None when the endpoint is off."""
        return None if self.listen is None else split_listen(self.listen)


class RecordingSettings(Strict):
    """The daemon's flight recorder (docs/recording.md): segments under ``<state_dir>/recordings/``."""

    enabled: bool = True
    # Segments older than this are removed (a new segment is started every ``segment``).
    keep: Duration = Field(default=7 * 86400.0, gt=0)
    segment: Duration = Field(default=3600.0, ge=60, le=86400)


class DaemonSettings(Strict):
    """The long-running ``xceprov daemon`` process (docs/daemon.md)."""

    log_format: Literal["text", "json"] = "text"
    stop_timeout: Duration = Field(default=STOP_TIMEOUT, gt=0, le=3600)
    # The longest the daemon waits between two reconcile passes; a demand push or a host event
    # starts one at once, so this only bounds how late time-driven work (idle reclaim, join
    # deadlines, backoffs ending) is noticed.
    reconcile_interval: Duration = Field(default=RECONCILE_INTERVAL, gt=0, le=3600)
    # How often the daemon reads its providers' interruption notices (docs/daemon.md, "Spot
    # interruption notices"): a notice is acted on at most this long after the cloud gave it.
    notice_interval: Duration = Field(default=5.0, gt=0, le=3600)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    recording: RecordingSettings = Field(default_factory=RecordingSettings)


def split_listen(listen: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` → (host, port); ValueError saying what is wrong (the caller names the value)."""
    host, sep, port_text = listen.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError("must be host:port, e.g. 127.0.0.1:9477 or [::1]:9477")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError("write an IPv6 address in brackets, e.g. [::1]:9477")
    port = int(port_text)
    if port > 65535:
        raise ValueError("port must be 0-65535 (0: any free port)")
    return host, port


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``); names are not resolved here (no I/O)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class RetrySettings(Strict):
    """Daemon policy: how a create op that failed is tried again (exponential backoff, jitter)."""

    # First delay; each further failure doubles it, up to ``max``. The jitter draws the delay
    # from [d/2, d] so that orchestrators failing together do not retry in step.
    base: Duration = 10.0
    max: Duration = 600.0
    # Consecutive transient failures of a template on a provider before it is passed over for
    # the next provider by priority (a capacity or quota error passes it over at once).
    attempts: int = Field(default=5, ge=1, le=100)

    @model_validator(mode="after")
    def _ordered(self) -> RetrySettings:
        if self.base <= 0 or self.max < self.base:
            raise ValueError(f"base {self.base:g}s must be above 0 and at most max {self.max:g}s")
        return self


class HoldSettings(Strict):
    """Daemon policy: how long the memory of refusals holds an offering (capacity) or a
    provider (quota) after the cloud refused it: ``base`` doubled per refusal in a row, up to
    ``max``, jittered down by at most half (reconcile/refusals.py)."""

    base: Duration
    max: Duration

    @model_validator(mode="after")
    def _ordered(self) -> HoldSettings:
        if self.base <= 0 or self.max < self.base:
            raise ValueError(f"base {self.base:g}s must be above 0 and at most max {self.max:g}s")
        return self


class CapacityHold(HoldSettings):
    """``policy.capacity_backoff``: an offering the cloud had no room for is probed again after
    1 min, 2, 4, ... up to 30 min."""

    base: Duration = 60.0
    max: Duration = 1800.0


class QuotaHold(HoldSettings):
    """``policy.quota_backoff``: a provider whose quota is reached is asked again after 10 min,
    20, ... up to 2 h (or once one of its instances went: the quota can have changed)."""

    base: Duration = 600.0
    max: Duration = 7200.0


class BreakerSettings(Strict):
    """Daemon policy: the circuit breaker of a template after bootstrap or join failures."""

    # ``failures`` bootstrap/join failures of one template within ``window``, with no success in
    # between, open its breaker: no more hosts are requested until ``xceprov breaker reset``
    # or ``cool_off`` has passed (then one more try: a failure reopens it, a success closes it).
    failures: int = Field(default=3, ge=1, le=1000)
    window: Duration = Field(default=1800.0, gt=0)
    cool_off: Duration = 3600.0


class OrphanSettings(Strict):
    """The orphan scan's policy (docs/configuration.md, "Orphans"; docs/orphans-json.md).

    Report first: an object tagged for this cluster that no fact explains is reported unless
    ``action`` opts in to more. Every automatic action (class (a) return, class (b) adopt,
    class (c) retirement) passes the guards; these knobs are theirs.
    """

    # What to do with a class (b) object (tagged, no fact) that matches no live host.
    action: OrphanAction = "report"
    # A class (b) object is acted on only this long after the cloud's own launch time.
    grace: Duration = 1800.0
    # At most this many automatic actions per provider within any ``interval`` (persisted,
    # so repeated scans and the administrator's confirmations count together).
    max_cleanup_per_interval: int = Field(default=10, ge=0, le=10_000)
    interval: Duration = Field(default=600.0, gt=0)
    # The breaker: more than this share of a provider's instances flagged at once means a view
    # is wrong, not the instances: nothing automatic happens on that provider this scan. It
    # needs at least ``breaker_min`` flagged instances (one orphan of two hosts is no broken view).
    breaker_share: float = Field(default=0.5, gt=0, le=1)
    breaker_min: int = Field(default=3, ge=1)
    # After a controller failover or restart (a new term): no automatic action until this long
    # after the term started AND every worker that had joined has rejoined or been declared lost.
    settle_window: Duration = Field(default=300.0, ge=0)
    # Detect, report and audit, but take no action (each finding says what would be done).
    dry_run: bool = False


class GroupBudget(Strict):
    """A host group's budget (``policy.group_budgets.<group>``; docs/cost.md)."""

    # The most the live and in-flight instances of the group's templates may cost per hour.
    per_hour: float | None = Field(default=None, ge=0)
    # The most the group may spend in a calendar month (UTC): no launch once what it spent so
    # far this month plus an hour of its instances' spend per hour would pass it.
    per_month: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_cap(self) -> GroupBudget:
        if self.per_hour is None and self.per_month is None:
            raise ValueError("a group budget needs per_hour, per_month or both")
        return self


class PolicySettings(Strict):
    """Daemon policy that is not per provider: cluster budget, cooldown, retries, breaker, lifetime."""

    # The most every live and in-flight instance of the cluster may cost per hour; unset = no cap.
    budget_per_hour: float | None = Field(default=None, ge=0)
    # Per host group (templates' xce.host_groups): the most its instances may cost per hour
    # and per calendar month (docs/cost.md).
    group_budgets: dict[str, GroupBudget] = Field(default_factory=dict)
    # Least time between two scale-ups of one template (a create refused for capacity or quota
    # does not count: its fallback goes at once).
    cooldown: Duration = 30.0
    # Hosts of a provider with max_lifetime are drained and returned from this long before it, so
    # the orchestrator's graceful return comes before the cloud's hard stop.
    lifetime_lead: Duration = 3600.0
    retry: RetrySettings = Field(default_factory=RetrySettings)
    # A capacity refusal holds its offering (flavor, zone, subnet) on the provider; a quota
    # refusal holds every offering of the provider, longer (or until one of its instances goes).
    capacity_backoff: CapacityHold = Field(default_factory=CapacityHold)
    quota_backoff: QuotaHold = Field(default_factory=QuotaHold)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    orphans: OrphanSettings = Field(default_factory=OrphanSettings)


class Config(Strict):
    """The whole site configuration."""

    cluster: str = Field(pattern=NAME_PATTERN)
    # Left out of the file under systemd: $STATE_DIRECTORY instead (configfile.from_systemd).
    state_dir: Path = Path(".xceprov")
    template_dirs: list[Path] = Field(default_factory=list)
    terraform: TerraformSettings = Field(default_factory=TerraformSettings)
    controller: ControllerSettings = Field(default_factory=ControllerSettings)
    ansible: AnsibleSettings = Field(default_factory=AnsibleSettings)
    sim: SimSettings = Field(default_factory=SimSettings)
    # Change the cloud with no controller at all (a local lock per provider, epoch ``none``,
    # facts kept in a local journal). Off by default: without a controller a mutation is refused.
    standalone: bool = False
    daemon: DaemonSettings = Field(default_factory=DaemonSettings)

    policy: PolicySettings = Field(default_factory=PolicySettings)
    providers: dict[str, ProviderSettings]
    templates: dict[str, HostTemplate]

    @model_validator(mode="after")
    def _references(self) -> Config:
        problems: list[str] = []
        for pname in self.providers:
            if not _is_name(pname):
                problems.append(f"providers.{pname}: name must match {NAME_PATTERN}")
        for tname, template in self.templates.items():
            if not _is_name(tname):
                problems.append(f"templates.{tname}: name must match {NAME_PATTERN}")
            if not template.providers:
                problems.append(f"templates.{tname}.providers: a template needs at least one provider")
            for pname, side in template.providers.items():
                if pname not in self.providers:
                    known = ", ".join(sorted(self.providers)) or "none"
                    problems.append(
                        f"templates.{tname}.providers.{pname}: no provider named {pname!r} (known: {known})"
                    )
                else:
                    problems += _side_problems(f"templates.{tname}.providers.{pname}", side, self.providers[pname])
            problems.extend(self._first_boot_problems(tname, template))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _first_boot_problems(self, tname: str, template: HostTemplate) -> list[str]:
        """What a ``first-boot`` template needs: a join key to mint its hosts' tokens, and on every
        provider a module that carries them to the host without storing them (docs/bootstrap.md)."""
        if template.bootstrap.mode != "first-boot":
            return []
        where = f"templates.{tname}.bootstrap.mode: first-boot"
        problems: list[str] = []
        if self.controller.join_key is None:
            problems.append(f"{where} needs controller.join_key (each host joins with its own token)")
        for pname in template.providers:
            provider = self.providers.get(pname)
            entry = provider_module(provider.module) if provider is not None else None
            if provider is not None and (entry is None or not entry.join_tokens):
                problems.append(
                    f"{where} needs a provider module that delivers join tokens at boot; provider {pname} "
                    f"uses module {provider.module}, which does not (xcesim does; docs/provider-modules.md)"
                )
        return problems

    def sim_state_dir(self) -> Path:
        """Where the simulated world keeps its durable state."""
        return self.sim.state_dir if self.sim.state_dir is not None else self.state_dir / "sim"


def _side_problems(where: str, side: TemplateOnProvider, provider: ProviderSettings) -> list[str]:
    """What the provider's module cannot do that the template asks of it there."""
    problems = _pool_problems(where, side, provider) if side.warm_pool > 0 else []
    entry = provider_module(provider.module)
    if side.select is not None and (entry is None or not entry.catalogue):
        # Named here, at load: otherwise the template would only ever find no offering.
        problems.append(
            f"{where}.select: module {provider.module!r} has no flavor catalogue to select from "
            "(name a flavor or list offerings instead, docs/provider-modules.md)"
        )
    return problems


def _pool_problems(where: str, side: TemplateOnProvider, provider: ProviderSettings) -> list[str]:
    """Why ``warm_pool`` cannot be kept on this provider (none when it can)."""
    entry = provider_module(provider.module)
    if entry is not None and not entry.power_state:
        return [
            f"{where}.warm_pool: {side.warm_pool}: module {provider.module!r} cannot keep instances stopped "
            "(no power_state support); set warm_pool: 0"
        ]
    if side.stopped_cost_per_hour > side.cost_per_hour:
        return [
            f"{where}.stopped_cost_per_hour: {side.stopped_cost_per_hour:g} is more than cost_per_hour "
            f"{side.cost_per_hour:g} (a stopped instance costs its disk only)"
        ]
    return []


def _is_name(value: str) -> bool:
    import re

    return re.fullmatch(NAME_PATTERN, value) is not None
