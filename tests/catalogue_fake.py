"""A fake Terraform engine for a catalogue root: ``init`` makes ``.terraform``, ``apply`` returns
``flavors`` as the root's output (or raises ``fail``); ``calls`` records both."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.messages import ApplyResult, Summary
from orchestrator.errors import TerraformError

FLAVOR = {"name": "c8", "cpus": 8, "memory_gb": 32, "gpus": 0, "cost_per_hour": 0.32, "zones": ["a"]}


class CatalogueEngine:
    """Init and apply of a catalogue root: ``flavors`` is the output, ``fail`` a TerraformError."""

    def __init__(self) -> None:
        self.flavors: Any = [FLAVOR]
        self.fail: str | None = None
        self.calls: list[str] = []

    def init(self, workdir: Path, backend_config: Any = None) -> None:
        self.calls.append("init")
        (workdir / ".terraform").mkdir(exist_ok=True)

    def apply(self, workdir: Path, var_files: Sequence[Path] = (), **_: Any) -> ApplyResult:
        self.calls.append("apply")
        assert (workdir / "main.tf").is_file() and all(Path(v).is_file() for v in var_files)
        if self.fail:
            raise TerraformError(self.fail)
        return ApplyResult((), (), (), Summary(), {"flavors": self.flavors})
