"""``getAvailableTemplates``: every host template × provider of ``xceprov.yaml`` as a template the
scheduler may ask for, named as the calling consumer names things (:mod:`.consumers`).

The ``templateId`` is ``<template>.<provider>`` (configuration names never hold a dot, so the
id is never ambiguous); for LSF's resource connector, which refuses template ids holding an
underscore, each ``_`` of the names is written ``-`` (two configured names that would then read
the same are refused, naming both). ``maxNumber`` is the most instances the template may have
on the provider: the provider's ``max_instances``, or the template's own ``max_instances``
there when lower. Attributes, as the resource connector types them (``[type, value]``, values
as text), under the consumer's names:

- LSF: ``type``, ``ncpus`` and ``ncores`` (slots), ``mem`` (the ``mem`` resource in MiB);
- a host factory (Symphony): ``type``, ``ncpus``, ``ncores``, ``nram`` (MiB);
- a generic caller: ``type``, ``model``, ``ncpus``, ``nram``;

``mem``/``nram`` is ``0`` when the template names no ``mem``. Every other numeric resource of
the template follows under its own name, and a true/false resource as ``["Boolean", "1"|"0"]``
(``Numeric`` for a host factory, whose attributes are String or Numeric).

``offerings`` lists what the template launches its machines on there (name, flavor, zone,
subnet, ``pricePerHour``, slots; docs/configuration.md, "Offerings"), and ``pricePerHour`` is
the cheapest one's (the template's ``cost_per_hour`` for a ``select:``, whose offerings the
catalogue names).
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.errors import ConfigError, ContractRefused
from orchestrator.model.config import Config
from orchestrator.model.text import printable
from orchestrator.services.contract.consumers import GENERIC, HOST_FACTORY, LSF, Consumer

ID_SEPARATOR = "."
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)i?B?\s*$", re.IGNORECASE)
_MIB_PER_UNIT = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def template_id(template: str, provider: str, consumer: Consumer = GENERIC) -> str:
    """The contract's id of ``template`` on ``provider``, as ``consumer`` is offered it."""
    tid = f"{template}{ID_SEPARATOR}{provider}"
    return tid.replace("_", "-") if consumer == LSF else tid


def offered_ids(config: Config, consumer: Consumer = GENERIC) -> dict[str, tuple[str, str]]:
    """Every templateId ``consumer`` is offered, to its ``(template, provider)``; ``ConfigError``
    when two of them read the same (``a_b`` and ``a-b`` for LSF)."""
    out: dict[str, tuple[str, str]] = {}
    for template, host in sorted(config.templates.items()):
        for provider in sorted(host.providers):
            tid = template_id(template, provider, consumer)
            if tid in out:
                first = template_id(*out[tid])
                raise ConfigError(
                    [
                        f"templates: {first} and {template_id(template, provider)} both read {tid} as LSF's "
                        "templateId (LSF refuses underscores: each _ is written -); rename one"
                    ]
                )
            out[tid] = (template, provider)
    return out


def resolve(config: Config, asked: str, consumer: Consumer = GENERIC) -> tuple[str, str]:
    """``(template, provider)`` of a templateId; ``ContractRefused`` naming the known ones."""
    ids = offered_ids(config, consumer)
    found = ids.get(asked)
    if found is None:
        raise ContractRefused(f"unknown templateId {printable(asked)[:80]!r} (known: {', '.join(ids) or 'none'})")
    return found


def max_number(config: Config, template: str, provider: str) -> int:
    """The most instances of ``template`` on ``provider`` (the provider's or the template's limit)."""
    limit = config.providers[provider].max_instances
    own = config.templates[template].providers[provider].max_instances
    return min(limit, own) if own is not None else limit


def mebibytes(value: object) -> int | None:
    """A memory size (``32G``, ``512M``, a number of MiB) in MiB; None when it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    found = _SIZE.match(str(value))
    if found is None:
        return None
    return int(float(found.group(1)) * _MIB_PER_UNIT[found.group(2).upper()])


def attributes(config: Config, template: str, consumer: Consumer = GENERIC) -> dict[str, tuple[str, str]]:
    """The template's attributes as ``[type, value]`` pairs, under ``consumer``'s names."""
    xce = config.templates[template].xce
    mem = str(mebibytes(xce.resources.get("mem", 0)) or 0)
    slots = ("Numeric", str(xce.slots))
    out: dict[str, tuple[str, str]] = {"type": ("String", xce.type)}
    if consumer == LSF:
        out.update(ncpus=slots, ncores=slots, mem=("Numeric", mem))
    elif consumer == HOST_FACTORY:
        out.update(ncpus=slots, ncores=slots, nram=("Numeric", mem))
    else:
        out.update(model=("String", xce.model), ncpus=slots, nram=("Numeric", mem))
    for name, value in sorted(xce.resources.items()):
        if name == "mem" or name in out:
            continue
        if isinstance(value, bool):
            out[name] = ("Numeric" if consumer == HOST_FACTORY else "Boolean", "1" if value else "0")
        elif isinstance(value, int | float):
            out[name] = ("Numeric", str(value))
    return out


def offerings(config: Config, template: str, provider: str) -> list[dict[str, Any]]:
    """The offerings ``template`` launches on ``provider``, in configured order (none for a
    ``select:``: its flavors come from the catalogue)."""
    host = config.templates[template]
    return [
        {
            "name": o.name,
            "flavor": o.flavor,
            "zone": o.zone,
            "subnet": o.subnet,
            "pricePerHour": o.cost_per_hour,
            "slots": o.slots,
        }
        for o in host.providers[provider].listed_offerings(host.xce.slots)
    ]


def available_templates(config: Config, consumer: Consumer = GENERIC) -> dict[str, Any]:
    """The ``getAvailableTemplates`` answer."""
    templates = []
    for tid, (name, provider) in offered_ids(config, consumer).items():
        listed = offerings(config, name, provider)
        price = config.templates[name].providers[provider].cost_per_hour
        templates.append(
            {
                "templateId": tid,
                "maxNumber": max_number(config, name, provider),
                "attributes": {k: list(v) for k, v in attributes(config, name, consumer).items()},
                "priority": config.providers[provider].priority,
                # The cheapest offering's: what the scheduler compares templates by.
                "pricePerHour": min((o["pricePerHour"] for o in listed), default=price),
                "offerings": listed,
            }
        )
    return {"templates": templates, "message": f"{len(templates)} templates"}
