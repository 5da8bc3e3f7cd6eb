"""The check between ``terraform plan`` and ``terraform apply``: a plan does what the op asked, only.

A create may create exactly the op's instance keys: no delete, no replacement, no update, no
other key. A return may delete exactly the chosen keys and nothing else. A warm-pool start may
update exactly its keys in place (power and tags) and nothing else. Anything else is
refused before the apply (``UnsafePlan``), naming what the plan would have done.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Set
from typing import Any

from orchestrator.clients.terraform.messages import PlanResult, ResourceChange
from orchestrator.errors import UnsafePlan
from orchestrator.model.modules import image_types

_KEY_IN_ADDR = re.compile(r'\["(?P<key>(?:[^"\\]|\\.)*)"\]$')


def change_key(change: ResourceChange) -> str:
    """The instance key a resource change is about (its ``for_each`` key), or its address."""
    if change.key is not None:
        return str(change.key)
    return address_key(change.addr)


def address_key(addr: str) -> str:
    """The ``for_each`` key at the end of a resource address (``…this["op-1-000"]``), or the address."""
    match = _KEY_IN_ADDR.search(addr)
    return match.group("key") if match else addr


def resource_keys(state: Mapping[str, Any]) -> set[str]:
    """The ``for_each`` keys of every resource in a ``terraform show -json`` state document."""
    keys: set[str] = set()
    modules = [(state.get("values") or {}).get("root_module") or {}]
    while modules:
        module = modules.pop()
        for resource in module.get("resources") or []:
            index = resource.get("index")
            if isinstance(index, str):
                keys.add(index)
        modules.extend(module.get("child_modules") or [])
    return keys


def _effective(plan: PlanResult) -> list[ResourceChange]:
    return [c for c in plan.changes if c.action not in ("no-op", "read")]


def _describe(changes: Iterable[ResourceChange]) -> str:
    return ", ".join(f"{c.action} {change_key(c)}" for c in changes)


def check_create(plan: PlanResult, keys: Set[str], what: str) -> None:
    """Refuse unless the plan only creates, and only keys of ``keys``."""
    wrong = [c for c in _effective(plan) if c.action != "create" or change_key(c) not in keys]
    if wrong:
        raise UnsafePlan(f"{what}: the plan would also {_describe(wrong)}; refused, nothing applied")


def check_delete(plan: PlanResult, keys: Set[str], what: str) -> list[str]:
    """Refuse unless the plan only deletes, and only keys of ``keys``; the keys it deletes."""
    changes = _effective(plan)
    wrong = [c for c in changes if c.action != "delete" or change_key(c) not in keys]
    if wrong:
        raise UnsafePlan(f"{what}: the plan would also {_describe(wrong)}; refused, nothing applied")
    return sorted(change_key(c) for c in changes)


def check_images(
    plan: PlanResult, what: str, *, create: Set[str] = frozenset(), delete: Set[str] = frozenset()
) -> None:
    """Refuse unless the plan only creates the images ``create`` and deletes the images ``delete``
    (keys of the ``images`` variable, docs/images.md): no instance, no other image, no update."""
    kinds = image_types()
    wrong = [
        c
        for c in _effective(plan)
        if c.type not in kinds
        or not (
            (c.action == "create" and change_key(c) in create) or (c.action == "delete" and change_key(c) in delete)
        )
    ]
    if wrong:
        raise UnsafePlan(f"{what}: the plan would also {_describe(wrong)}; refused, nothing applied")


def check_start(plan: PlanResult, keys: Set[str], what: str) -> list[str]:
    """Refuse unless the plan only updates in place, and only keys of ``keys`` (a warm-pool start:
    power and tags); the keys it updates."""
    changes = _effective(plan)
    wrong = [c for c in changes if c.action != "update" or change_key(c) not in keys]
    if wrong:
        raise UnsafePlan(f"{what}: the plan would also {_describe(wrong)}; refused, nothing applied")
    return sorted(change_key(c) for c in changes)
