"""Turning ``TEMPLATE=N`` requests into ops: which provider, how many, which op ids.

Provider choice for a preview: the provider named with ``--provider``, else the template's
provider with the highest ``priority`` that still has room under ``max_instances`` (counting
the instances already in its desired set). Counts are rounded up to the provider's
``granularity``. The op goes to the cheapest offering of that provider
(:func:`~orchestrator.reconcile.offers.offerings_for`: lowest cost per slot, then the configured
order; a preview reads no memory of refusals); a provider on which the template has no offering
(a ``select:`` not resolved) is passed over. Every problem is reported before anything is
rendered or written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.offerings import Placement
from orchestrator.model.ops import OpRequest
from orchestrator.reconcile.offers import NOTHING_SELECTED, Selected, offerings_for

# ASCII digits only (``\d`` would take any script's digits); a count of more than MAX_COUNT_DIGITS
# digits is beyond every provider's limit and is refused before it is converted.
REQUEST = re.compile(r"^(?P<template>[^=\s]+)=(?P<count>-?[0-9]+)$")
MAX_COUNT_DIGITS = 9


def parse_requests(args: Sequence[str]) -> dict[str, int]:
    """``["cpu=20", "gpu=2"]`` → ``{"cpu": 20, "gpu": 2}``; malformed words are usage errors."""
    wanted: dict[str, int] = {}
    for arg in args:
        match = REQUEST.match(arg)
        if match is None:
            raise UsageError(f"{arg!r}: expected TEMPLATE=COUNT, for example cpu=20")
        if len(match.group("count").lstrip("-0")) > MAX_COUNT_DIGITS:
            raise UsageError(f"{arg[:40]!r}: count out of range (at most {MAX_COUNT_DIGITS} digits)")
        template, count = match.group("template"), int(match.group("count"))
        wanted[template] = wanted.get(template, 0) + count
    return wanted


def choose_ops(
    config: Config,
    wanted: Mapping[str, int],
    provider: str | None,
    existing: Mapping[str, int],
    selected: Selected = NOTHING_SELECTED,
) -> list[OpRequest]:
    """One op per template; ``existing`` counts the instances each provider already has;
    ``selected``: the offerings ``select:`` templates resolved from their catalogues."""
    if provider is not None and provider not in config.providers:
        known = ", ".join(sorted(config.providers))
        raise UsageError(f"--provider {provider}: no such provider (known: {known})")
    problems: list[str] = []
    ops: list[OpRequest] = []
    used = dict(existing)
    for template, asked in wanted.items():
        if template not in config.templates:
            known = ", ".join(sorted(config.templates))
            problems.append(f"{template}={asked}: unknown template {template!r} (known: {known})")
            continue
        if asked <= 0:
            problems.append(f"{template}={asked}: count must be a positive number")
            continue
        candidates = _candidates(config, template, provider)
        if not candidates:
            problems.append(f"{template}={asked}: template {template!r} has no provider {provider!r}")
            continue
        chosen: OpRequest | None = None
        offered = {name: offerings_for(config, template, name, selected) for name in candidates}
        candidates = [name for name in candidates if offered[name]]
        if not candidates:
            problems.append(f"{template}={asked}: no offering of template {template!r} on {', '.join(offered)}")
            continue
        for name in candidates:
            settings = config.providers[name]
            count = round_up(asked, settings.granularity)
            if used.get(name, 0) + count <= settings.max_instances:
                placement = (Placement(offered[name][0].name, count),)
                chosen = OpRequest(template=template, provider=name, count=count, asked=asked, placements=placement)
                break
        if chosen is None:
            limits = ", ".join(
                f"{n}: {used.get(n, 0)} of max_instances {config.providers[n].max_instances}" for n in candidates
            )
            problems.append(f"{template}={asked}: beyond every provider's max_instances ({limits})")
            continue
        used[chosen.provider] = used.get(chosen.provider, 0) + chosen.count
        ops.append(chosen)
    if problems:
        raise UsageError("\n".join(problems))
    return ops


def round_up(count: int, granularity: int) -> int:
    """``count`` rounded up to a multiple of ``granularity`` (a provider hands out hosts in steps)."""
    return -(-count // granularity) * granularity


def by_priority(config: Config, template: str) -> list[str]:
    """The providers of ``template``, highest ``priority`` first (ties by name, so stable)."""
    names = list(config.templates[template].providers)
    return sorted(names, key=lambda n: (-config.providers[n].priority, n))


def _candidates(config: Config, template: str, provider: str | None) -> list[str]:
    names = by_priority(config, template)
    return names if provider is None else [n for n in names if n == provider]
