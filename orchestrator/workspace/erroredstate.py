"""Terraform's ``errored.tfstate``: the state it could not write to its backend, written there later.

When the backend fails as Terraform writes the state at the end of an apply (the database of
``terraform.backend: pg`` stopped, a full disk), Terraform leaves the state it meant to write in
the working directory as ``errored.tfstate`` (0600, see ``clients.terraform.process``) and stops.
That state is the only record of what the apply created since the backend's last write: a plan
against the backend alone would not know those objects.

:func:`recover_errored_state` brings it back before anything else uses the shard (the executor
calls it under the fence): ``terraform state push`` (never ``-force``) writes it when the
backend still holds an older serial of the same lineage. Terraform refuses the push when the
backend moved on since (another writer's state of a newer serial, or of another lineage):
that state is the newer record, and the errored one is superseded. Either way the file is then
removed; what it listed is in the outcome (and the audit log), never lost without a trace.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from orchestrator import durable
from orchestrator.clients.terraform.backend import ERRORED_STATE
from orchestrator.clients.terraform.engine import Engine
from orchestrator.errors import FinalError, TerraformError


@dataclass(frozen=True)
class Recovered:
    """What became of an ``errored.tfstate``: ``pushed`` to the backend, or ``superseded`` by its state."""

    outcome: Literal["pushed", "superseded"]
    path: Path
    serial: int
    lineage: str
    resources: tuple[str, ...]
    reason: str = ""

    def evidence(self) -> dict[str, Any]:
        """JSON-ready, for the audit entry."""
        found: dict[str, Any] = {
            "file": str(self.path),
            "serial": self.serial,
            "lineage": self.lineage,
            "resources": list(self.resources),
        }
        if self.reason:
            found["reason"] = self.reason
        return found


def has_errored_state(workdir: Path) -> bool:
    """Whether Terraform left an ``errored.tfstate`` in ``workdir``."""
    return (workdir / ERRORED_STATE).is_file()


def recover_errored_state(engine: Engine, workdir: Path) -> Recovered | None:
    """Write ``workdir``'s ``errored.tfstate`` to its backend, or find it superseded; then remove it.

    None when there is none. The caller holds the shard's lock and its fence. ``FinalError``
    (the file kept) when it cannot be read as a state; a backend that cannot be reached fails the
    push as ``StoreUnavailable`` (the file kept: the next op tries again).
    """
    path = workdir / ERRORED_STATE
    try:
        state = durable.parse_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise FinalError(
            f"{path}: Terraform's state that its backend could not take cannot be read ({exc}); "
            "inspect it, push it with terraform state push if it is whole, then remove it"
        ) from None
    if not isinstance(state, dict):
        raise FinalError(f"{path}: not a Terraform state (a JSON object expected); inspect it, then remove it")
    serial, lineage = int(state.get("serial") or 0), str(state.get("lineage") or "")
    resources = _resources(state)
    try:
        engine.state_push(workdir, state)
        outcome: Recovered = Recovered("pushed", path, serial, lineage, resources)
    except TerraformError as exc:
        current = engine.state_pull(workdir)
        if not _moved_on(current, serial, lineage):
            raise
        reason = f"the backend holds serial {current.get('serial')} of lineage {current.get('lineage')}: {exc}"
        outcome = Recovered("superseded", path, serial, lineage, resources, reason)
    durable.remove(path)
    return outcome


def _moved_on(current: dict[str, Any], serial: int, lineage: str) -> bool:
    """Whether the backend's state is a newer record than the errored one (a push was right to fail)."""
    if str(current.get("lineage") or "") != lineage:
        return True
    return int(current.get("serial") or 0) >= serial


def _resources(state: dict[str, Any]) -> tuple[str, ...]:
    """The address of every resource instance the state records (``module.m.type.name["key"]``)."""
    found: list[str] = []
    for resource in state.get("resources") or []:
        if not isinstance(resource, dict):
            continue
        mode = "data" if resource.get("mode") == "data" else ""
        parts = (resource.get("module"), mode, resource.get("type"), resource.get("name"))
        base = ".".join(str(part) for part in parts if part)
        for instance in resource.get("instances") or []:
            key = instance.get("index_key") if isinstance(instance, dict) else None
            found.append(base if key is None else f"{base}[{json.dumps(key)}]")
    return tuple(found)
