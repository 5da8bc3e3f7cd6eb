"""Render host templates into the instance entries a provider module receives.

Three files render per instance, each overridable by a site: ``hostname.j2`` (the name),
``node-manager.json.j2`` (the node manager configuration, worker role) embedded by
``cloud-init.yaml.j2`` (the user data), and ``instance.json.j2`` (the entry itself). Every
output is parsed and checked before it goes anywhere: invalid JSON or YAML, or an entry whose
owner tags were changed by a site template, is a configuration error naming the file. A
provider's ``max_lifetime`` becomes the owner tag ``xce:max_lifetime`` and the template context
``max_lifetime``; user data that then does not write it to ``/etc/xce/max-lifetime`` (the in-host
shutdown of the cloud backstop) is refused the same way. Every tag of an entry must be a label
the provider module's cloud takes (``orchestrator/model/labels.py``: a site's tags as they are,
the toolkit's through the module's key map and value encoding); one that cannot be is refused in
one line naming template, provider, key and value. A ``first-boot`` template's node manager
configuration names ``join_token_file`` (the context's ``join_token_file``, ``/etc/xce/join-token``);
its token is never rendered: the provider module writes it at boot (``model/firstboot.py``), and a
site template that leaves the file out is refused too.

Offerings (docs/configuration.md, "Offerings"): every key renders on one offering of its
template and provider, the one the op's placements give its index (``offering_at``), else the
provider's default offering (the ``flavor:``, else the first listed). The entry takes the
offering's ``flavor``, ``zone`` and ``subnet``; the owner tag ``xce:offering`` names it (a site
template cannot change it, like every owner tag); the context's ``cloud`` is the provider block
with ``flavor``, ``zone``, ``subnet``, ``cost_per_hour``, ``offering`` and ``slots`` set from
it, and the node manager's ``xce.slots`` are its slots. A ``select:`` template's offerings come
from the provider's catalogue, handed over resolved (``RenderRequest.offerings``); a name no
offering has is refused in one line naming template, provider and offering.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from orchestrator.configfile import load_yaml
from orchestrator.errors import ConfigError
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.firstboot import FIRST_BOOT, JOIN_TOKEN_FILE
from orchestrator.model.hostnames import MAX_LABEL
from orchestrator.model.instances import InstanceSpec, instance_key
from orchestrator.model.labels import LabelError
from orchestrator.model.modules import labels_of
from orchestrator.model.offerings import Offering, Placement, default_offering, offering_at
from orchestrator.render.environment import TemplateRenderer
from orchestrator.render.trust import ca_file_present, read_ca_file

# Where cloud-init.yaml.j2 writes the host's maximum lifetime (whole seconds) for its shutdown timer.
LIFETIME_FILE = "/etc/xce/max-lifetime"


@dataclass(frozen=True)
class RenderRequest:
    """One op to render: ``count`` instances of ``template`` on ``provider``."""

    provider: str
    template: str
    op_id: str
    count: int
    epoch: str = owner.NO_EPOCH
    first_index: int = 0
    # Which offering each key is on, in key order from index 0 (model/offerings.py); None: every
    # key on the provider's default offering.
    placements: Sequence[Placement] | None = None
    # Offerings resolved from the provider's catalogue (a ``select:`` template), by name; they
    # join the listed ones (the default is the first listed, else the first of these).
    offerings: Mapping[str, Offering] = field(default_factory=dict)


def request_offerings(config: Config, request: RenderRequest) -> tuple[dict[str, Offering], Offering]:
    """The offerings a request can render on, by name, and the default one; ``ConfigError`` when
    there is none (a ``select:`` template rendered without its catalogue's offerings)."""
    template = config.templates[request.template]
    listed = template.providers[request.provider].listed_offerings(template.xce.slots)
    known = {o.name: o for o in listed}
    for name, offering in request.offerings.items():
        known.setdefault(name, offering)
    if not known:
        raise ConfigError(
            [
                f"template {request.template} on provider {request.provider}: selects flavors from the "
                "provider's catalogue, and no offering was resolved from it"
            ]
        )
    return known, default_offering(listed or list(known.values()))


def _offering_of(request: RenderRequest, known: Mapping[str, Offering], default: Offering, index: int) -> Offering:
    name = offering_at(request.placements, index, default.name)
    if name not in known:
        raise ConfigError(
            [
                f"template {request.template} on provider {request.provider}: no offering {name!r} "
                f"(it has {', '.join(sorted(known))})"
            ]
        )
    return known[name]


def offering_cloud(cloud: dict[str, Any], offering: Offering) -> dict[str, Any]:
    """The render context's ``cloud``: the provider block with the offering's values set."""
    return {
        **cloud,
        "flavor": offering.flavor,
        "zone": offering.zone,
        "subnet": offering.subnet,
        "cost_per_hour": offering.cost_per_hour,
        "offering": offering.name,
        "slots": offering.slots,
    }


def template_dir_problems(config: Config, source: str = "") -> list[str]:
    """One line per ``template_dirs`` entry that is not a directory.

    A missing site directory is an error, never skipped: the template loader would quietly
    render the built-in templates in its place, and hosts would boot without the site's files.
    """
    where = f"{source}: " if source else ""
    return [
        f"{where}template_dirs.{i}: {path}: {'not a directory' if path.exists() else 'no such directory'} "
        "(the built-in templates are not used in its place)"
        for i, path in enumerate(config.template_dirs)
        if not path.is_dir()
    ]


def renderer_for(config: Config, builtin_dir: Path, source: str = "") -> TemplateRenderer:
    """A renderer searching the site's template directories, then the built-in ones.

    ``ConfigError`` (one line per entry, naming ``source`` when given) when a site directory is missing.
    """
    if problems := template_dir_problems(config, source):
        raise ConfigError(problems)
    return TemplateRenderer([*config.template_dirs, builtin_dir])


def controller_context(config: Config, allow_missing_ca: bool = False) -> dict[str, Any]:
    """What templates know about the controller: the addresses hosts use and the CA.

    ``ca_pem`` is the checked content of ``controller.ca`` (certificates only, see
    :mod:`.trust`), or None with ``ca: system`` (hosts use their system trust store). A CA file
    that does not exist is an error unless ``allow_missing_ca`` (``xceprov validate`` before
    ``xceprov sim up`` made it).
    """
    settings = config.controller
    ca_pem: str | None = None
    if settings.ca is not None and (ca_file_present(settings.ca) or not allow_missing_ca):
        ca_pem = read_ca_file(settings.ca)
    return {"addresses": worker_addresses(config), "ca_pem": ca_pem}


def worker_addresses(config: Config) -> list[str]:
    """The controller addresses provisioned hosts use (``worker_addresses``, else ``addresses``)."""
    return list(config.controller.worker_addresses or config.controller.addresses)


def render_op(
    config: Config,
    renderer: TemplateRenderer,
    request: RenderRequest,
    controller: dict[str, Any] | None = None,
) -> dict[str, InstanceSpec]:
    """Render every instance of one op, keyed by instance key (``controller``: a precomputed
    :func:`controller_context`, read once per burst)."""
    template = config.templates[request.template]
    provider = config.providers[request.provider]
    cloud = template.providers[request.provider]
    controller = controller if controller is not None else controller_context(config)
    max_lifetime = provider.max_lifetime_seconds()
    labels = labels_of(provider.module)
    first_boot = template.bootstrap.mode == FIRST_BOOT
    known, default = request_offerings(config, request)
    block = cloud.model_dump()
    rendered: dict[str, InstanceSpec] = {}
    for index in range(request.first_index, request.first_index + request.count):
        key = instance_key(request.op_id, index)
        offering = _offering_of(request, known, default, index)
        owner_tags = {
            **owner.owner_tags(
                config.cluster, request.provider, request.op_id, request.epoch, request.template, max_lifetime
            ),
            owner.OFFERING: offering.name,
        }
        context: dict[str, Any] = {
            "cluster": config.cluster,
            "provider": request.provider,
            "provider_module": provider.module,
            "template": request.template,
            # The node manager's slots are the offering's (a bigger flavor may hold more).
            "xce": {**template.xce.model_dump(), "slots": offering.slots},
            "cloud": offering_cloud(block, offering),
            "bootstrap": template.bootstrap.model_dump(),
            "op_id": request.op_id,
            "index": index,
            "key": key,
            "epoch": request.epoch,
            "owner_tags": owner_tags,
            # Owner tags last: a site tag can never override them.
            "tags": {**provider.tags, **template.tags, **owner_tags},
            "controller": controller,
            # Whole seconds or None; cloud-init.yaml.j2 writes it as data for the in-host shutdown.
            "max_lifetime": max_lifetime,
            # First boot: where the host finds its token (written by the provider module at boot).
            "join_token_file": JOIN_TOKEN_FILE if first_boot else None,
        }
        name = renderer.render("hostname.j2", request.template, context).strip()
        if not name or "\n" in name:
            raise ConfigError([f"hostname.j2: rendered an empty or multi-line name {name!r}"])
        if max(len(label) for label in name.split(".")) > MAX_LABEL:
            raise ConfigError(
                [
                    f"hostname.j2: rendered name {name!r} has a label longer than {MAX_LABEL} characters "
                    "(RFC 1123); shorten the cluster or template name, or the site's hostname.j2"
                ]
            )
        context["name"] = name
        nm_text = renderer.render("node-manager.json.j2", request.template, context)
        context["node_manager_config"] = _check_json(nm_text, "node-manager.json.j2")
        if first_boot:
            _check_token_file(context["node_manager_config"])
        user_data = renderer.render("cloud-init.yaml.j2", request.template, context)
        _check_cloud_config(user_data, max_lifetime)
        context["user_data"] = user_data
        entry_text = renderer.render("instance.json.j2", request.template, context)
        spec = _placed(_instance_spec(entry_text, owner_tags), offering)
        try:
            labels.to_labels(spec.tags)
        except LabelError as exc:
            raise ConfigError(
                [
                    f"instance.json.j2: template {request.template} on provider {request.provider} "
                    f"(module {provider.module}): {exc}"
                ]
            ) from None
        rendered[key] = spec
    return rendered


def _check_json(text: str, filename: str) -> str:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError([f"{filename}:{exc.lineno}: rendered invalid JSON: {exc.msg}"]) from None
    except (ValueError, RecursionError) as exc:  # an integer of thousands of digits, arrays nested thousands deep
        raise ConfigError([f"{filename}: rendered unusable JSON: {_json_problem(exc)}"]) from None
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def _check_token_file(node_manager_config: str) -> None:
    """A first-boot host joins only with its token: a site template cannot drop the file's name."""
    named = json.loads(node_manager_config).get("join_token_file")
    if named != JOIN_TOKEN_FILE:
        raise ConfigError(
            [
                f"node-manager.json.j2: a first-boot template's configuration must name join_token_file "
                f"{JOIN_TOKEN_FILE!r}, not {named!r} (keep the join_token_file part of the built-in template)"
            ]
        )


def _json_problem(exc: BaseException) -> str:
    """What is wrong with a rendered document beyond its syntax, in a few words."""
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return str(exc).split(";")[0]  # Python's integer-length message ends with advice for programmers


# Every host's user data is parsed once to check it: libyaml's safe loader (the same safe
# constructor, in C) where PyYAML was built with it, 10 times the pure-Python one's speed; at
# 1000 hosts the pure-Python parse was most of the rendering (bench/bench_executor.py --profile).
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _check_cloud_config(text: str, max_lifetime: int | None) -> None:
    if not text.startswith("#cloud-config"):
        raise ConfigError(["cloud-init.yaml.j2: rendered user data must start with '#cloud-config'"])
    try:
        data = yaml.load(text, Loader=_SAFE_LOADER)  # a safe loader (C or Python)
    except yaml.YAMLError as exc:
        raise ConfigError([f"cloud-init.yaml.j2: rendered invalid YAML: {exc}".splitlines()[0]]) from None
    except (ValueError, TypeError, LookupError, AttributeError, ArithmeticError, RecursionError) as exc:
        # A value the constructors cannot build (``2026-02-30``, ``!!bool maybe``): the slower
        # Python loader of xceprov.yaml says where, with line and key path; failing that, in short.
        load_yaml(text, "cloud-init.yaml.j2: rendered user data")
        raise ConfigError([f"cloud-init.yaml.j2: rendered unusable YAML: {_json_problem(exc)}"]) from None
    if not isinstance(data, dict):
        raise ConfigError(["cloud-init.yaml.j2: rendered user data is not a mapping"])
    if max_lifetime is not None:
        _check_lifetime_file(data, max_lifetime)


def _check_lifetime_file(data: dict[str, Any], max_lifetime: int) -> None:
    """The in-host half of the backstop must be there: a site template cannot drop it silently.

    On EC2 and Nova the host's own shutdown is the only thing that ends a forgotten instance, so
    a site ``cloud-init.yaml.j2`` that leaves out the lifetime file is refused, like one that
    drops an owner tag.
    """
    files = data.get("write_files")
    entries = files if isinstance(files, list) else []
    for entry in entries:
        if isinstance(entry, dict) and entry.get("path") == LIFETIME_FILE:
            if str(entry.get("content", "")).strip() == str(max_lifetime):
                return
            found = entry.get("content")
            raise ConfigError([f"cloud-init.yaml.j2: {LIFETIME_FILE} must hold {max_lifetime}, not {found!r}"])
    raise ConfigError(
        [
            f"cloud-init.yaml.j2: the provider sets max_lifetime but the user data does not write {LIFETIME_FILE} "
            "(keep the max_lifetime part of the built-in template)"
        ]
    )


def _instance_spec(text: str, owner_tags: dict[str, str]) -> InstanceSpec:
    try:
        spec = InstanceSpec.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        raise ConfigError([f"instance.json.j2:{exc.lineno}: rendered invalid JSON: {exc.msg}"]) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ConfigError([f"instance.json.j2: rendered entry: {where}: {first['msg']}"]) from None
    except (ValueError, RecursionError) as exc:
        raise ConfigError([f"instance.json.j2: rendered unusable JSON: {_json_problem(exc)}"]) from None
    for key, value in owner_tags.items():
        if spec.tags.get(key) != value:
            raise ConfigError([f"instance.json.j2: rendered entry lost owner tag {key}={value!r}"])
    return spec


def _placed(spec: InstanceSpec, offering: Offering) -> InstanceSpec:
    """The entry with the offering's zone and subnet: filled in where a site template written
    before offerings leaves them out; one naming another is refused (the memory of refusals and
    the plans name the offering's)."""
    update: dict[str, str] = {}
    for attribute in ("zone", "subnet"):
        wanted, rendered = getattr(offering, attribute), getattr(spec, attribute)
        if wanted is None or rendered == wanted:
            continue
        if rendered is not None:
            raise ConfigError(
                [
                    f"instance.json.j2: rendered {attribute} {rendered!r}, but offering {offering.name} "
                    f"is in {attribute} {wanted!r} (render cloud.{attribute})"
                ]
            )
        update[attribute] = wanted
    return spec.model_copy(update=update) if update else spec


def render_settings(config: Config, provider: str) -> dict[str, Any]:
    """A provider's module settings (site values over the module's defaults), with string values
    rendered (``{{ sim_state_dir }}`` etc.)."""
    renderer = TemplateRenderer([])
    context: dict[str, object] = {
        "cluster": config.cluster,
        "provider": provider,
        "state_dir": str(config.state_dir),
        "sim_state_dir": str(config.sim_state_dir()),
    }

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, str):
            return renderer.render_string(value, context, path)
        if isinstance(value, dict):
            return {k: walk(v, f"{path}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{path}[{i}]") for i, v in enumerate(value)]
        return value

    settings = config.providers[provider].module_settings()
    return {k: walk(v, f"providers.{provider}.settings.{k}") for k, v in settings.items()}
