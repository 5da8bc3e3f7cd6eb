"""The provider-module registry: everything the toolkit knows of a module beyond its Terraform.

A provider module (``terraform/modules/<m>/``, ``terraform/roots/<m>/``; the contract is
docs/provider-modules.md) is described to the orchestrator by ONE :class:`ProviderModule`
entry in :data:`MODULES`, and every reader asks the registry: the cloud view's drift
(``workspace/cloudview.py``: what drift of an instance resource means a host is gone), the
import of an unmanaged object (``instance_address``), the classification of a failed create
into capacity, quota, transient or permanent (``ops/refusal.py``, at the op's boundary with
Terraform), the owner tags as the cloud's labels (:class:`~orchestrator.model.labels.LabelMap`, built from
the entry's ``tag_*`` fields: the one key map and value encoding every reader and writer of
tags uses), the settings a module gets by default, and the cloud's console output API
(``console``: where first-boot results are read, ``ops/consoleresults.py``), and where its cloud
gives interruption notices (``notices``: read by the daemon, ``ops/notices.py``).
Adding a module is its directories and one entry here (CONTRIBUTING.md, "Adding a provider
module"); ``tests/unit/terraform/test_modules_static.py`` holds each entry against the
module's code.

Data only: no I/O, nothing imported but the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

from orchestrator.model import tags as owner
from orchestrator.model.labels import ANY_TAG_TEXT, AS_IS, LabelMap


class FailureClass(StrEnum):
    """What kind of failure a create met; the order here is the order rules are checked in.

    * **capacity**: the cloud has no room for this flavor now (the template falls back to the
      next provider by priority; the provider is tried again after a backoff);
    * **quota**: the account's limit is reached (every template on that provider falls back);
    * **permanent**: the request itself is wrong (bad parameter, image, permission, Terraform
      configuration): retrying cannot help;
    * **transient**: throttling, timeouts, internal errors (retried in place after a backoff).
    """

    CAPACITY = "capacity"
    QUOTA = "quota"
    PERMANENT = "permanent"
    TRANSIENT = "transient"


@dataclass(frozen=True)
class ErrorRule:
    """Error codes or phrases (case-insensitive, matched as words) that mean ``kind``."""

    kind: FailureClass
    codes: tuple[str, ...]


@dataclass(frozen=True)
class Classification:
    """The class of a failure, the code that decided it ("" = no rule matched) and its text."""

    kind: FailureClass
    matched: str
    text: str

    def evidence(self) -> dict[str, Any]:
        """JSON-ready: class, matched code ("" = no rule matched) and the diagnostic text."""
        return {"class": self.kind.value, "matched": self.matched, "text": self.text}


@dataclass(frozen=True)
class ConsoleApi:
    """How the module's cloud serves an instance's console output, where first-boot results are
    read (docs/provider-modules.md, "Console output"; ``orchestrator.model.bootresult``).

    ``call``: the cloud's API; ``limit``: the most it returns, in bytes; ``end``: which end of a
    longer console it returns (``tail``: the latest output, where a result line is printed);
    ``built_in``: whether this toolkit reads it (a module whose reader is not built in leaves
    its first-boot hosts to the controller and the join deadline: no result is read).
    """

    call: str
    limit: int
    end: str = "tail"
    built_in: bool = False


@dataclass(frozen=True)
class NoticeApi:
    """Where the module's cloud gives interruption notices (a spot reclaim coming), which the
    daemon reads every ``daemon.notice_interval`` (docs/provider-modules.md, "Interruption
    notices"; ``orchestrator.ops.notices``).

    ``source``: the cloud's API or feed; ``lead``: how long before the reclaim a notice
    usually comes, in seconds (0: not known); ``built_in``: whether this toolkit reads it (a
    module whose reader is not built in leaves its hosts to the host-loss path: the loss is still
    recorded when the cloud reclaims, with no warning before).
    """

    source: str
    lead: float = 0.0
    built_in: bool = False


@dataclass(frozen=True)
class ProviderModule:
    """One provider module as the orchestrator sees it.

    ``instance_types``: the resource type(s) of a host in the module (the first is ``this``,
    what an import addresses); ``drift_types``: resource types whose drift says a host changed
    or is gone (default: the instance types); ``error_rules``: how the cloud's refusals read,
    checked in :class:`FailureClass` order; ``tag_keys``: toolkit tag key → the cloud's label
    key (identity where the cloud takes ``xce:`` keys); ``tag_chars``: one character class every
    label key and value must match; ``tag_escape``: the character that starts an encoded toolkit
    value ("": none, values must fit as they are); ``tag_max_length``: the longest label key or
    value (0: no limit); ``default_settings``: settings the module gets unless the site sets
    them. ``labels`` is the :class:`LabelMap` of the ``tag_*`` fields (ValueError here when it
    is not collision-free). ``image_types``: the resource type of a baked image (``xceprov image
    bake``, docs/images.md; empty: the module makes no images, and ``image_refusal`` says what a
    site does instead). ``power_state``: whether the module stops and starts an instance in
    place from its ``power_state`` input (what a warm pool needs, docs/configuration.md).
    ``join_tokens``: whether the module's root takes the ephemeral root variable ``join_tokens``
    (instance key -> token) and delivers each token to its host's first boot without Terraform
    storing it (what ``bootstrap: {mode: first-boot}`` needs, docs/bootstrap.md). ``console``:
    how its cloud serves console output (None: it does not). ``catalogue``: whether the module
    has a catalogue root (``terraform/catalogue/<m>``) that outputs the cloud's flavors, what a
    template's ``select:`` picks from (docs/provider-modules.md, "Flavor catalogue"). ``notices``:
    where its cloud gives interruption notices (None: it gives none).
    """

    name: str
    instance_types: tuple[str, ...]
    error_rules: tuple[ErrorRule, ...]
    drift_types: tuple[str, ...] = ()
    tag_keys: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    tag_chars: str = ANY_TAG_TEXT
    tag_escape: str = ""
    tag_max_length: int = 0
    default_settings: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    labels: LabelMap = field(init=False, repr=False, compare=False)
    image_types: tuple[str, ...] = ()
    image_refusal: str = "it makes no images"
    power_state: bool = False
    join_tokens: bool = False
    console: ConsoleApi | None = None
    catalogue: bool = False
    notices: NoticeApi | None = None

    def __post_init__(self) -> None:
        if not self.instance_types:
            raise ValueError(f"provider module {self.name!r}: no instance resource type")
        if not self.drift_types:
            object.__setattr__(self, "drift_types", self.instance_types)
        labels = LabelMap(self.name, self.tag_keys, self.tag_chars, self.tag_escape, self.tag_max_length)
        object.__setattr__(self, "labels", labels)

    def instance_address(self, key: str) -> str:
        """The address of instance ``key`` in a root of this module, as ``terraform import`` takes it."""
        return f'module.instances.{self.instance_types[0]}.this["{key}"]'


# Rules every module shares: Terraform's own configuration errors and network failures.
TERRAFORM_RULES: Final = (
    ErrorRule(
        FailureClass.PERMANENT,
        ("Unsupported argument", "Unsupported", "Invalid value for variable", "Forbidden"),
    ),
    ErrorRule(
        FailureClass.TRANSIENT,
        (
            "RequestTimeout",
            "ServiceUnavailable",
            "Unavailable",
            "timeout while waiting",
            "i/o timeout",
            "connection reset",
            "connection refused",
            "TLS handshake timeout",
            "Service Unavailable",
            "retryable",
        ),
    ),
)

# EC2's error codes, however the AWS provider wraps them (``creating EC2 Instance:
# InsufficientInstanceCapacity: ...``, ``... api error VcpuLimitExceeded: ...``). An AWS
# capacity error also says ``status code: 500``: capacity and quota are checked first.
EC2_RULES: Final = (
    ErrorRule(
        FailureClass.CAPACITY,
        (
            "InsufficientInstanceCapacity",  # RunInstances: no capacity of the type in the AZ
            "InsufficientHostCapacity",  # dedicated hosts
            "InsufficientReservedInstanceCapacity",
            "InsufficientCapacity",  # Fleet/Spot
            "InsufficientFreeAddressesInSubnet",
        ),
    ),
    ErrorRule(
        FailureClass.QUOTA,
        (
            "InstanceLimitExceeded",  # running instances of the account
            "VcpuLimitExceeded",  # vCPU limit of the instance bucket
            "MaxSpotInstanceCountExceeded",
            "AddressLimitExceeded",
            "requested more instances",  # "You have requested more instances (1) than your current instance limit"
        ),
    ),
    ErrorRule(
        FailureClass.PERMANENT,
        (
            "InvalidParameterValue",
            "InvalidParameterCombination",
            "InvalidParameter",
            "InvalidAMIID",
            "InvalidInstanceID",
            "InvalidKeyPair",
            "InvalidSubnetID",
            "InvalidGroup",
            "IdempotentParameterMismatch",
            "UnauthorizedOperation",
            "AuthFailure",
            "OptInRequired",
        ),
    ),
    ErrorRule(
        FailureClass.TRANSIENT,
        ("RequestLimitExceeded", "Throttling", "ThrottlingException", "InternalError", "InternalFailure"),
    ),
)

# Nova, Neutron, Cinder and Glance as the OpenStack provider words them (``Quota exceeded for
# instances: Requested 1, but already used 10 of 10 instances``, NoValidHost).
OPENSTACK_RULES: Final = (
    ErrorRule(FailureClass.CAPACITY, ("No valid host was found", "NoValidHost", "not enough hosts available")),
    ErrorRule(FailureClass.QUOTA, ("Quota exceeded", "QuotaExceeded", "OverQuota", "exceeding quota limits")),
    ErrorRule(FailureClass.PERMANENT, ("Unable to find image", "Unable to find flavor", "Bad request with")),
)

# The simulated cloud speaks EC2's codes: ``InsufficientCapacity: flavor c8 in zone b has no
# capacity``, ``InstanceLimitExceeded`` for its account quota (``xceprov sim fault quota``),
# ``AddressLimitExceeded`` for a full network, ``RequestLimitExceeded`` for its busy store.
XCESIM_RULES: Final = EC2_RULES

# Every module known to this toolkit, by the name ``providers.<name>.module`` gives.
MODULES: dict[str, ProviderModule] = {
    "xcesim": ProviderModule(
        name="xcesim",
        instance_types=("xcesim_instance",),
        error_rules=XCESIM_RULES + TERRAFORM_RULES,
        # The simulated cloud's store lives in the simulated world's state directory, which only
        # the orchestrator knows.
        default_settings=MappingProxyType({"store": "{{ sim_state_dir }}/cloud.sqlite"}),
        image_types=("xcesim_image",),
        # xcesim_instance.power_state: stopped and started in place (the warm pool).
        power_state=True,
        # The provider configuration takes the tokens and writes each into its instance's boot copy
        # of the user data (orchestrator/sim/cloud/provider.py), never into an attribute it stores.
        join_tokens=True,
        # The host manager keeps each host's boot output; the cloud serves its latest 64 KiB.
        console=ConsoleApi("the simulated cloud's console output", 64 * 1024, "tail", built_in=True),
        # The xcesim_flavors data source: the cloud's catalogue, with prices and zones.
        catalogue=True,
        # xceprov sim fault spot-notice: the cloud's table of notices, read through its store.
        notices=NoticeApi("the simulated cloud's interruption notices", 120.0, built_in=True),
    ),
    "aws": ProviderModule(
        name="aws",
        instance_types=("aws_instance",),
        error_rules=EC2_RULES + TERRAFORM_RULES,
        image_types=("aws_ami_from_instance",),
        # ec2:GetConsoleOutput with Latest=true: the most recent 64 KiB, base64 (Nitro instances).
        console=ConsoleApi("EC2 GetConsoleOutput (Latest=true)", 64 * 1024, "tail"),
        # aws_ec2_instance_types + aws_ec2_instance_type: no prices (select: cost_per_cpu_hour).
        catalogue=True,
        # The two-minute Spot interruption warning: EventBridge "EC2 Spot Instance Interruption
        # Warning", or instance metadata spot/instance-action on the host (docs/provider-modules.md).
        notices=NoticeApi('EventBridge "EC2 Spot Instance Interruption Warning" (spot/instance-action)', 120.0),
    ),
    "openstack": ProviderModule(
        name="openstack",
        instance_types=("openstack_compute_instance_v2",),
        error_rules=OPENSTACK_RULES + TERRAFORM_RULES,
        # The OpenStack provider has no resource that snapshots a server (docs/images.md).
        image_refusal=(
            "the Terraform OpenStack provider has no resource that makes an image from a server; "
            "snapshot a builder server yourself (openstack server image create) and set the template's image "
            "to its id (docs/images.md)"
        ),
        # POST /servers/{id}/action {"os-getConsoleOutput": {"length": N}}: the last N lines.
        console=ConsoleApi("Nova os-getConsoleOutput (length: last lines)", 64 * 1024, "tail"),
        # openstack_compute_flavor_v2 per flavor the site names (settings.catalogue_flavors): the
        # provider cannot list flavors; no prices.
        catalogue=True,
    ),
}


def provider_module(name: str) -> ProviderModule | None:
    """The registry entry of module ``name`` (None for a module the toolkit does not know)."""
    return MODULES.get(name)


def image_types() -> frozenset[str]:
    """Every resource type that is a baked image, over all modules (read at call time)."""
    return frozenset(t for m in MODULES.values() for t in m.image_types)


def drift_types() -> frozenset[str]:
    """Every resource type whose drift is about a host, over all modules (read at call time)."""
    return frozenset(t for m in MODULES.values() for t in m.drift_types)


def error_rules(name: str | None = None) -> tuple[ErrorRule, ...]:
    """Module ``name``'s rules; for an unknown module or None, every module's rules together."""
    entry = MODULES.get(name) if name else None
    if entry is not None:
        return entry.error_rules
    return _merged(m.error_rules for m in MODULES.values())


def _merged(groups: Iterable[tuple[ErrorRule, ...]]) -> tuple[ErrorRule, ...]:
    codes: dict[FailureClass, dict[str, None]] = {kind: {} for kind in FailureClass}
    for rules in groups:
        for rule in rules:
            codes[rule.kind].update(dict.fromkeys(rule.codes))
    return tuple(ErrorRule(kind, tuple(codes[kind])) for kind in FailureClass if codes[kind])


def labels_of(module: str) -> LabelMap:
    """The label map of module ``module`` (tags as they are for a module the toolkit does not know)."""
    entry = MODULES.get(module)
    return entry.labels if entry is not None else AS_IS


def label_refusal(entry: ProviderModule, common: Mapping[str, str], templates: Iterable[str] = ()) -> str | None:
    """Why module ``entry``'s cloud cannot carry the toolkit's tags (None when it can).

    ``common``: the tags every instance of the provider carries (cluster and provider);
    ``templates``: the templates that run on the provider. Every toolkit tag's label key must
    fit the module's labels, and those values must be labels (as they are or encoded). A
    template's name must be its ``xce:template`` label as it is: the module contract compares
    an instance's template with that tag (terraform/contract/variables.tf).
    """
    labels = entry.labels
    for key in owner.TOOLKIT_TAGS:
        problem = labels.key_problem(key)
        if problem is not None:
            return problem
    try:
        for key, value in common.items():
            labels.encode(key, value)
    except ValueError as exc:
        return f"module {entry.name}: {exc}"
    for name in templates:
        if not labels.verbatim(name):
            return (
                f"module {entry.name}: template name {name!r} is not a label value as it is, "
                f"which its {labels.label_key(owner.TEMPLATE)} label must be (the contract compares the two)"
            )
    return None
