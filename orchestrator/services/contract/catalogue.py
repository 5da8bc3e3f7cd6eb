"""``getAvailableTemplates``: every host template × provider of ``xceprov.yaml`` as a template the
scheduler may ask for.

The ``templateId`` is ``<template>.<provider>`` (configuration names never hold a dot, so the
id is never ambiguous); ``maxNumber`` is the most instances the template may have on the
provider: the provider's ``max_instances``, or the template's own ``max_instances`` there when
lower. Attributes, as the resource connector types them (``[type, value]``, values as text):
``type`` (the XCE host type), ``ncpus`` (slots), ``nram`` (the ``mem`` resource in MiB, ``0``
when the template names none), ``model``, and every other numeric resource of the template
(``gpu`` …) under its own name.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.errors import ContractRefused
from orchestrator.model.config import Config
from orchestrator.model.text import printable

ID_SEPARATOR = "."
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)i?B?\s*$", re.IGNORECASE)
_MIB_PER_UNIT = {"": 1 / (1024 * 1024), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def template_id(template: str, provider: str) -> str:
    """The contract's id of ``template`` on ``provider``."""
    return f"{template}{ID_SEPARATOR}{provider}"


def resolve(config: Config, asked: str) -> tuple[str, str]:
    """``(template, provider)`` of a templateId; ``ContractRefused`` naming the known ones."""
    template, _, provider = asked.partition(ID_SEPARATOR)
    known = config.templates.get(template)
    if known is None or provider not in known.providers:
        ids = ", ".join(template_id(t, p) for t, h in sorted(config.templates.items()) for p in sorted(h.providers))
        raise ContractRefused(f"unknown templateId {printable(asked)[:80]!r} (known: {ids or 'none'})")
    return template, provider


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


def attributes(config: Config, template: str) -> dict[str, tuple[str, str]]:
    """The template's attributes as ``[type, value]`` pairs."""
    xce = config.templates[template].xce
    mem = mebibytes(xce.resources.get("mem", 0))
    out: dict[str, tuple[str, str]] = {
        "type": ("String", xce.type),
        "model": ("String", xce.model),
        "ncpus": ("Numeric", str(xce.slots)),
        "nram": ("Numeric", str(mem or 0)),
    }
    for name, value in sorted(xce.resources.items()):
        if name != "mem" and name not in out and isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = ("Numeric", str(value))
    return out


def available_templates(config: Config) -> dict[str, Any]:
    """The ``getAvailableTemplates`` answer."""
    templates = [
        {
            "templateId": template_id(name, provider),
            "maxNumber": max_number(config, name, provider),
            "attributes": {k: list(v) for k, v in attributes(config, name).items()},
            "priority": config.providers[provider].priority,
            "pricePerHour": on.cost_per_hour,
        }
        for name, template in sorted(config.templates.items())
        for provider, on in sorted(template.providers.items())
    ]
    return {"templates": templates, "message": f"{len(templates)} templates"}
