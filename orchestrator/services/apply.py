"""``xceprov apply BUNDLE``: apply exactly the plans a ``plan --out`` saved, or refuse.

For each provider in the bundle: the desired set becomes the plan's variables (written before
the apply: the intent is recorded before the cloud is touched, so a crash mid-apply leaves a
desired set that the next plan completes rather than undoes), then Terraform applies the saved
plan. Terraform itself refuses a plan whose state moved; the desired set is then restored
(atomically) and the user gets ``StaleState``. Every apply is written to the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import StaleState, UsageError
from orchestrator.workspace.audit import audit
from orchestrator.workspace.bundle import read_bundle
from orchestrator.workspace.terraform import engine_for, instances_output, prepared_workdir
from orchestrator.workspace.workdir import ProviderWorkdir


@dataclass(frozen=True)
class AppliedProvider:
    """What one provider holds after the apply (key → {id, name, address, ...})."""

    name: str
    instances: dict[str, dict[str, Any]]


def apply_bundle(
    loaded: LoadedConfig, bundle: Path, toolkit_root: Path, engine: Engine | None = None
) -> list[AppliedProvider]:
    """Apply every provider plan in ``bundle``; stop at the first refusal."""
    config = loaded.config
    entries = read_bundle(bundle, config.cluster)
    for entry in entries:
        if entry.provider not in config.providers:
            raise UsageError(f"{bundle}: provider {entry.provider!r} is not in the configuration")
    engine = engine or engine_for(config)
    applied: list[AppliedProvider] = []
    for entry in entries:
        name = entry.provider
        workdir = ProviderWorkdir(config, name, toolkit_root)
        prepared_workdir(engine, workdir)
        with workdir.lock():
            shown = engine.show_plan(workdir.path, entry.plan_file)
            variables = {k: v.get("value") for k, v in shown.get("variables", {}).items()}
            previous = workdir.desired.snapshot()
            creates = sorted(
                rc.get("index") or rc.get("address")
                for rc in shown.get("resource_changes", [])
                if "create" in rc.get("change", {}).get("actions", [])
            )
            audit(config.state_dir, "apply", provider=name, bundle=str(bundle), create=creates)
            workdir.desired.write(variables)
            try:
                engine.apply(workdir.path, plan_file=entry.plan_file)
            except StaleState:
                workdir.desired.restore(previous)
                audit(config.state_dir, "apply-refused", provider=name, bundle=str(bundle), reason="stale plan")
                raise
            outputs = engine.output(workdir.path)
        audit(
            config.state_dir,
            "applied",
            provider=name,
            bundle=str(bundle),
            instances=len(variables.get("instances") or {}),
        )
        applied.append(AppliedProvider(name=name, instances=instances_output(outputs)))
    return applied
