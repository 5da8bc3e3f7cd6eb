"""``xceprov plan``: a Terraform plan of a requested burst, changing nothing.

For each provider the burst touches, the desired set is extended in memory with the rendered
instances of the new ops, written to a temporary variables file, and planned against the
provider's current state: the create op's own steps (``orchestrator.ops.steps``: render,
variables, candidate variables file, plan), with the op's fencing and intent not invoked.
Nothing is applied and no lease is needed. With ``out`` the plans are saved in a plan bundle
(a directory with one Terraform plan per provider and a manifest);
``xceprov apply`` applies exactly those plans or refuses because the state moved.

Host loss (docs/operations.md, "Previews and host loss"): before anything is planned, each
provider that holds instances is observed read-only, with the executor's own rules
(``orchestrator.ops.losses.preview_losses``). What it would judge lost is shown as lost, left
out of the planned desired set and of the room the provider has, and named in the bundle's
manifest: the preview adds what ``apply`` adds, never a re-create of a lost instance.

Shards (docs/architecture.md, "Bursts that scale"): what a provider holds is counted over every
shard's desired set (``max_instances`` is per provider, not per state). The saved plan is a
preview made in shard 0 (its desired set plus the new instances); ``xceprov apply`` carries the
ops out through the executor, which places the keys over the shards and plans each shard anew.

Offerings (docs/plan-json.md): each op renders its keys on the offerings the policy placed it on
(``OpRequest.placements``); every instance shows its offering (its ``xce:offering`` tag), flavor,
zone, subnet and cost per hour (its offering's), and each provider the added cost per offering.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import ConfigError
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.instances import InstanceSpec, new_op_id
from orchestrator.model.offerings import Offering
from orchestrator.model.ops import OpRequest
from orchestrator.ops.catalogue import catalogue_reader
from orchestrator.ops.images import resolve_baked
from orchestrator.ops.losses import preview_losses
from orchestrator.ops.steps import plan_desired, render_instances
from orchestrator.reconcile.budget import unit_cost
from orchestrator.reconcile.policy import choose_ops
from orchestrator.render.instances import RenderRequest, template_dir_problems
from orchestrator.services.missing_ca import missing_ca
from orchestrator.workspace.bundle import BUNDLE_FORMAT, create_bundle, discard_bundle, plan_path, seal_bundle
from orchestrator.workspace.module_settings import settings_problems
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.terraform import engine_for, ready_workdir
from orchestrator.workspace.workdir import ProviderWorkdir

_KEY_IN_ADDR = re.compile(r'\["(?P<key>(?:[^"\\]|\\.)*)"\]$')


@dataclass(frozen=True)
class PlannedInstance:
    """One instance the plan touches."""

    key: str
    template: str
    name: str
    tags: dict[str, str]
    action: str
    image: str = ""  # what a created instance starts from (``bake:newest`` resolved: docs/images.md)
    # Its offering (the xce:offering tag; "" for an instance rendered before offerings) and what
    # that places it as; cost_per_hour: the offering's (the template's without one).
    offering: str = ""
    flavor: str = ""
    zone: str | None = None
    subnet: str | None = None
    cost_per_hour: float = 0.0


@dataclass(frozen=True)
class LostPlanned:
    """One instance the cloud took away: ``apply`` records it lost and never re-creates it."""

    key: str
    instance_id: str
    template: str
    name: str
    reason: str


@dataclass(frozen=True)
class ProviderPlan:
    """What the plan does on one provider."""

    name: str
    module: str
    add: int
    change: int
    destroy: int
    cost_per_hour: float
    cost_by_template: dict[str, float] = field(default_factory=dict)
    # Template → offering → added cost per hour of the instances created on it.
    cost_by_offering: dict[str, dict[str, float]] = field(default_factory=dict)
    instances: list[PlannedInstance] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)
    plan_file: str | None = None
    lost: list[LostPlanned] = field(default_factory=list)


@dataclass(frozen=True)
class BurstPlan:
    """The whole preview; ``to_json()`` is the documented ``--json`` document."""

    cluster: str
    providers: list[ProviderPlan]
    out: str | None = None
    warnings: list[str] = field(default_factory=list)  # one line each, for stderr (not in the JSON)

    @property
    def cost_per_hour(self) -> float:
        """Added cost per hour of every instance the plan creates."""
        return round(sum(p.cost_per_hour for p in self.providers), 4)

    def to_json(self) -> dict[str, Any]:
        """The document ``xceprov plan --json`` prints (see docs/plan-json.md)."""
        return {
            "format": BUNDLE_FORMAT,
            "cluster": self.cluster,
            "cost_per_hour": self.cost_per_hour,
            "out": self.out,
            "providers": [asdict(p) for p in self.providers],
        }


def plan_burst(
    loaded: LoadedConfig,
    wanted: Mapping[str, int],
    provider: str | None = None,
    out: Path | None = None,
    toolkit_root: Path | None = None,
    engine: Engine | None = None,
) -> BurstPlan:
    """Plan the burst ``wanted`` (template → count); save the plans in ``out`` when given."""
    from orchestrator.paths import toolkit_root as find_root

    config = loaded.config
    root = toolkit_root or find_root()
    workdirs = {name: ProviderWorkdir(config, name, root) for name in config.providers}
    # Validate the whole request before anything is rendered or written.
    targets = (
        {provider} if provider else {p for t in wanted if t in config.templates for p in config.templates[t].providers}
    )
    desired = {name: workdirs[name].desired.read() for name in targets if name in workdirs}
    # The select: templates' offerings (their catalogues read, only when a wanted template selects).
    selected = selected_for(config, wanted, provider)
    choose_ops(config, wanted, provider, {}, selected)  # the request itself, before Terraform
    if problems := settings_problems(config, root, loaded.source) + template_dir_problems(config, loaded.source):
        raise ConfigError(problems)
    engine = engine or engine_for(config)
    lost = {name: _lost(engine, workdirs[name], held) for name, held in desired.items()}
    # A lost instance leaves the provider when the apply retires it: it takes no room. The ops are
    # chosen with the room each provider really has.
    room = {name: provider_count(config, name, root) - len(lost[name]) for name in desired}
    ops = choose_ops(config, wanted, provider, room, selected)
    desired = {name: {k: v for k, v in held.items() if k not in lost[name]} for name, held in desired.items()}
    warnings = [f"{missing}; previewed without it, apply needs it"] if (missing := missing_ca(loaded)) else []
    rendered: dict[str, dict[str, tuple[OpRequest, str, dict[str, InstanceSpec]]]] = {}
    for op in ops:
        op_id = new_op_id()
        # The op's own render step; a preview needs no CA file (apply renders every op again and
        # does): the same rule as validate.
        offerings = {o.name: o for o in selected.get((op.template, op.provider), ())}
        request = RenderRequest(
            op.provider, op.template, op_id, op.count, placements=op.placements, offerings=offerings
        )
        # bake:newest is resolved as the op resolves it, so the plan shows the concrete id.
        resolved = resolve_baked(config, engine, workdirs[op.provider], op.template)
        specs = render_instances(resolved, root, request, source=loaded.source, allow_missing_ca=True)
        rendered.setdefault(op.provider, {})[op_id] = (op, op_id, specs)
    if out is not None:
        create_bundle(out)
    try:
        plans = [
            _plan_provider(
                config, engine, workdirs[name], desired.get(name, {}), by_op, out, lost.get(name, {}), selected
            )
            for name, by_op in sorted(rendered.items())
        ]
        if out is not None:
            seal_bundle(
                out,
                config.cluster,
                loaded.source,
                {p.name: plan_path(out, p.name) for p in plans},
                {p.name: [item.key for item in p.lost] for p in plans},
            )
    except BaseException:
        if out is not None:
            discard_bundle(out)
        raise
    return BurstPlan(cluster=config.cluster, providers=plans, out=str(out) if out else None, warnings=warnings)


def provider_count(config: Config, provider: str, root: Path) -> int:
    """How many instances the provider's desired sets hold, over every shard."""
    shards = ProviderShards(config, provider, root)
    return sum(len(shards.keys(shard)) for shard in shards.all())


def _lost(engine: Engine, workdir: ProviderWorkdir, held: Mapping[str, InstanceSpec]) -> dict[str, LostPlanned]:
    """What the next create's observation of ``workdir`` would judge lost (read-only), by key."""
    if not held:
        return {}  # nothing managed yet: nothing can have been lost (and no Terraform runs)
    ready_workdir(engine, workdir)
    with workdir.lock():
        found = preview_losses(engine, workdir)
    lost: dict[str, LostPlanned] = {}
    for item in found:
        spec = held.get(item.instance_key)
        template, name = (spec.template, spec.name) if spec else ("", "")
        lost[item.instance_key] = LostPlanned(item.instance_key, item.instance_id, template, name, item.reason)
    return lost


def _plan_provider(
    config: Config,
    engine: Engine,
    workdir: ProviderWorkdir,
    current: dict[str, InstanceSpec],
    by_op: Mapping[str, tuple[OpRequest, str, dict[str, InstanceSpec]]],
    out: Path | None,
    lost: Mapping[str, LostPlanned],
    selected: Mapping[tuple[str, str], Sequence[Offering]] | None = None,
) -> ProviderPlan:
    new: dict[str, InstanceSpec] = {}
    for _op, _op_id, specs in by_op.values():
        new.update(specs)
    candidate = {**current, **new}
    plan_file = plan_path(out, workdir.provider) if out is not None else None
    ready_workdir(engine, workdir)
    # The op's own plan step (orchestrator.ops.steps), with none of its fencing: no gate, no
    # intent, the desired set left as it is, and the root's ``fence`` at its default.
    with workdir.lock():
        result = plan_desired(config, engine, workdir, candidate, out=plan_file).result
    cloud = {
        t: config.templates[t].providers[workdir.provider]
        for t in config.templates
        if workdir.provider in config.templates[t].providers
    }
    instances: list[PlannedInstance] = []
    add = change = destroy = 0
    cost_by_template: dict[str, float] = {}
    cost_by_offering: dict[str, dict[str, float]] = {}
    for rc in result.changes:
        key = str(rc.key) if rc.key is not None else _key_from_addr(rc.addr)
        spec = candidate.get(key) if key else None
        action = rc.action
        if action in ("create", "replace"):
            add += 1
        if action in ("delete", "replace"):
            destroy += 1
        if action == "update":
            change += 1
        offering = spec.tags.get(owner.OFFERING, "") if spec else ""
        # Its offering's price (budget.unit_cost: the default offering's for a tag it no longer lists;
        # a select: one's from the catalogue).
        cost = (
            unit_cost(config, workdir.provider, spec.template, offering=offering, selected=selected or {})
            if spec
            else 0.0
        )
        if action == "create" and spec is not None and spec.template in cloud:
            cost_by_template[spec.template] = cost_by_template.get(spec.template, 0.0) + cost
            row = cost_by_offering.setdefault(spec.template, {})
            row[offering] = row.get(offering, 0.0) + cost
        instances.append(
            PlannedInstance(
                key=key or rc.addr,
                template=spec.template if spec else "",
                name=spec.name if spec else "",
                tags=_merged_tags(workdir, spec),
                action=action,
                image=spec.image if spec else "",
                offering=offering,
                flavor=spec.flavor if spec else "",
                zone=spec.zone if spec else None,
                subnet=spec.subnet if spec else None,
                cost_per_hour=cost,
            )
        )
    ops = [
        {
            "op_id": op_id,
            "template": op.template,
            "count": op.count,
            "asked": op.asked,
            "placements": [{"offering": p.offering, "count": p.count} for p in op.placements],
        }
        for op_id, (op, _, _) in sorted(by_op.items())
    ]
    return ProviderPlan(
        name=workdir.provider,
        module=workdir.module,
        add=add,
        change=change,
        destroy=destroy,
        cost_per_hour=round(sum(cost_by_template.values()), 4),
        cost_by_template={t: round(c, 4) for t, c in sorted(cost_by_template.items())},
        cost_by_offering={
            t: {o: round(c, 4) for o, c in sorted(row.items())} for t, row in sorted(cost_by_offering.items())
        },
        instances=sorted(instances, key=lambda i: i.key),
        ops=ops,
        plan_file=plan_file.name if plan_file else None,
        lost=[lost[key] for key in sorted(lost)],
    )


def selected_for(
    config: Config, wanted: Mapping[str, int], provider: str | None
) -> dict[tuple[str, str], list[Offering]]:
    """(template, provider) -> the offerings its ``select:`` picks from the provider's catalogue
    (``ops/catalogue.py``: the kept catalogue, read again past ``catalogue_ttl``), in the policy's
    order, for every wanted template that selects (on ``provider`` when given); nothing is read
    when none does. A catalogue that cannot be read, or a match without a price, is one line per
    pair (ConfigError); a selection nothing matches is left to the policy (the next provider, or
    no offering)."""
    pairs = {
        (template, name)
        for template in wanted
        if template in config.templates
        for name, side in config.templates[template].providers.items()
        if side.select is not None and provider in (None, name)
    }
    if not pairs:
        return {}
    found = catalogue_reader(config).selections()
    problems = [
        f"templates.{template}.providers.{name}.select: no offering: {found.problems[(template, name)]}"
        for template, name in sorted(pairs)
        if (template, name) in found.problems
    ]
    if problems:
        raise ConfigError(problems)
    return {pair: list(found.selected.get(pair, [])) for pair in sorted(pairs)}


def _merged_tags(workdir: ProviderWorkdir, spec: InstanceSpec | None) -> dict[str, str]:
    # The module tags every object with merge(common_tags, instance tags), as the cloud labels
    # them (the module's label map: keys mapped, values encoded); show the same.
    if spec is None:
        return {}
    return workdir.labels.to_labels({**workdir.common_tags(), **spec.tags})


def _key_from_addr(addr: str) -> str | None:
    match = _KEY_IN_ADDR.search(addr)
    return match.group("key").replace('\\"', '"').replace("\\\\", "\\") if match else None
