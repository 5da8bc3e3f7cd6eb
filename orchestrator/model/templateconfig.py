"""Host templates in the configuration: the XCE side, the cloud side per provider (its
flavor, offerings or flavor selection), the bootstrap side (docs/configuration.md, "Templates")."""

from __future__ import annotations

import typing
from typing import Any, Literal

from pydantic import Field, model_validator

from orchestrator.model.offerings import OFFERING_NAME, Offering, offering_name
from orchestrator.model.strict import Strict


class XceSide(Strict):
    """What the XCE controller knows about hosts of a template."""

    type: str = "X86_64"
    model: str = "generic"
    slots: int = Field(default=1, ge=1)
    # A true/false value is a Boolean host attribute (e.g. LSF's resource that marks borrowed
    # hosts); bool comes first so that YAML's true is not taken as the number 1.
    resources: dict[str, bool | str | int | float] = Field(default_factory=dict)
    host_groups: list[str] = Field(default_factory=list)


class OfferingSettings(Strict):
    """One offering of ``offerings:`` (docs/configuration.md, "Offerings"; model/offerings.py)."""

    flavor: str = Field(min_length=1)
    zone: str | None = Field(default=None, min_length=1)
    subnet: str | None = Field(default=None, min_length=1)
    # Unset: the template's cost_per_hour on this provider.
    cost_per_hour: float | None = Field(default=None, ge=0)
    # Unset: the template's xce.slots (a bigger flavor may give its host more slots).
    slots: int | None = Field(default=None, ge=1)
    # Unset: flavor, flavor@zone, flavor@subnet.
    name: str | None = Field(default=None, pattern=OFFERING_NAME)


class CountRange(Strict):
    """An inclusive range of a flavor attribute; either end may be left open."""

    min: float | None = Field(default=None, ge=0)
    max: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> CountRange:
        if self.min is not None and self.max is not None and self.max < self.min:
            raise ValueError(f"max {self.max:g} is below min {self.min:g}")
        return self


class FlavorSelection(Strict):
    """``select:``: the flavors of the provider's catalogue whose attributes fall in these ranges
    (docs/configuration.md, "Offerings"); each selected flavor (and zone, when ``zones`` names
    some) is one offering, priced by the catalogue or, where the catalogue has no price, by
    ``cost_per_cpu_hour`` times its cpus."""

    cpus: CountRange | None = None
    memory_gb: CountRange | None = None
    gpus: CountRange | None = None
    zones: list[str] = Field(default_factory=list)
    max_cost_per_hour: float | None = Field(default=None, ge=0)
    cost_per_cpu_hour: float | None = Field(default=None, ge=0)
    # The slots of a selected flavor's host: the template's xce.slots, or the flavor's cpus.
    slots: Literal["template", "cpus"] = "template"
    # The most flavors kept (cheapest per slot first): a wide selection stays a short list.
    limit: int = Field(default=10, ge=1, le=100)


class TemplateOnProvider(Strict):
    """The cloud side of a template on one provider.

    Exactly one of ``flavor`` (one offering), ``offerings`` (a list) or ``select`` (attributes
    matched against the provider's catalogue).
    """

    flavor: str | None = Field(default=None, min_length=1)
    offerings: list[OfferingSettings] = Field(default_factory=list)
    select: FlavorSelection | None = None
    image: str = Field(min_length=1)
    cost_per_hour: float = Field(default=0.0, ge=0)
    # What one instance costs per hour while stopped (a warm-pool instance): its disk only in
    # the cost model; the budgets count pool instances at this price (docs/configuration.md).
    stopped_cost_per_hour: float = Field(default=0.0, ge=0)
    # Instances of the template kept stopped on this provider, started first when demand comes
    # (docs/daemon.md, "The warm pool"); 0: no pool.
    warm_pool: int = Field(default=0, ge=0, le=1000)
    # Daemon policy: at most this many instances of the template on the provider (on top of the
    # provider's max_instances); unset = only the provider's limit.
    max_instances: int | None = Field(default=None, ge=1)
    disk_gb: int | None = Field(default=None, ge=1)
    network: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_way_to_name_flavors(self) -> TemplateOnProvider:
        ways = [w for w, on in (("flavor", self.flavor), ("offerings", self.offerings), ("select", self.select)) if on]
        if len(ways) != 1:
            said = " and ".join(ways) if ways else "none of them"
            raise ValueError(f"give exactly one of flavor, offerings or select (got {said})")
        names = [o.name or offering_name(o.flavor, o.zone, o.subnet) for o in self.offerings]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"offerings: {', '.join(twice)} listed twice (give each a distinct name)")
        return self

    def listed_offerings(self, template_slots: int) -> list[Offering]:
        """The offerings named in the configuration, in its order (none for ``select``: those come
        from the catalogue); ``template_slots``: the template's ``xce.slots``."""
        if self.flavor is not None:
            return [Offering(self.flavor, self.flavor, None, None, self.cost_per_hour, template_slots, "flavor")]
        return [
            Offering(
                o.name or offering_name(o.flavor, o.zone, o.subnet),
                o.flavor,
                o.zone,
                o.subnet,
                self.cost_per_hour if o.cost_per_hour is None else o.cost_per_hour,
                o.slots or template_slots,
                "listed",
            )
            for o in self.offerings
        ]

    def default_offering_name(self) -> str:
        """The name of the offering keys whose intent names none are on: the ``flavor:``, else
        the first listed; "" for ``select:`` (the catalogue's first, known where it is read)."""
        if self.flavor is not None:
            return self.flavor
        if self.offerings:
            first = self.offerings[0]
            return first.name or offering_name(first.flavor, first.zone, first.subnet)
        return ""


BootstrapMode = Literal["push", "first-boot"]
BOOTSTRAP_MODES: tuple[str, ...] = typing.get_args(BootstrapMode)


class BootstrapSide(Strict):
    """What the bootstrap play does on hosts of a template.

    ``mode``: ``push`` (the control node's Ansible play configures each new host over SSH) or
    ``first-boot`` (the host starts from an image that holds the node manager and joins by
    itself from its user data and its join token; no play runs per host: docs/bootstrap.md).
    """

    mode: BootstrapMode = "push"
    groups: list[str] = Field(default_factory=list)
    vars: dict[str, Any] = Field(default_factory=dict)
    roles: list[str] = Field(default_factory=list)


class HostTemplate(Strict):
    """A kind of host; demand is counted per template."""

    xce: XceSide = Field(default_factory=XceSide)
    tags: dict[str, str] = Field(default_factory=dict)
    providers: dict[str, TemplateOnProvider]
    bootstrap: BootstrapSide = Field(default_factory=BootstrapSide)
