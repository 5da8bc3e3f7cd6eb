"""The desired instance set of one provider: ``desired.tfvars.json`` in its working directory.

The file is the complete Terraform variables document (every instance of the provider keyed
by instance key, the common tags, the module settings). It is the intent: it is written before
Terraform touches the cloud, so a crash mid-apply leaves a set that the next plan completes.
Every change replaces the file atomically and durably (``orchestrator.durable``); a refused
apply puts the previous content back the same way, never by rewriting the file in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orchestrator import durable
from orchestrator.errors import FinalError
from orchestrator.model.instances import InstanceSpec

DESIRED = "desired.tfvars.json"


@dataclass(frozen=True)
class Snapshot:
    """The desired set's file as it was (``None``: there was no file), for :meth:`DesiredSet.restore`."""

    content: bytes | None


class DesiredSet:
    """Reads and replaces one provider's desired set."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> dict[str, InstanceSpec]:
        """The desired instances keyed by instance key (empty when nothing was ever applied)."""
        try:
            data = durable.parse_json(self.path.read_text(encoding="utf-8"))
            instances = data.get("instances") or {}
            return {str(key): InstanceSpec.model_validate(value) for key, value in instances.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, AttributeError, ValidationError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise FinalError(f"{self.path}: unreadable desired set: {first}") from None

    def write(self, variables: Mapping[str, Any]) -> None:
        """Replace the desired set with ``variables`` (atomic, durable, 0600)."""
        durable.write_json_atomic(self.path, dict(variables))

    def snapshot(self) -> Snapshot:
        """The current content, to put back with :meth:`restore` if what follows is refused."""
        try:
            return Snapshot(self.path.read_bytes())
        except FileNotFoundError:
            return Snapshot(None)

    def restore(self, snapshot: Snapshot) -> None:
        """Put a snapshot back atomically: readers see the refused set or the old one, never a mix."""
        if snapshot.content is None:
            durable.remove(self.path)
        else:
            durable.write_bytes_atomic(self.path, snapshot.content)
