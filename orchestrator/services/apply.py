"""``xceprov apply BUNDLE``: apply exactly the plans a ``plan --out`` saved, or refuse.

For each provider in the bundle: the desired set becomes the plan's variables (written before
the apply: the intent is recorded before the cloud is touched, so a crash mid-apply leaves a
desired set that the next plan completes rather than undoes), then Terraform applies the saved
plan. Terraform itself refuses a plan whose state moved; the desired set is then restored and
the user gets ``StaleState``. Every apply is written to the audit log.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import StaleState, UsageError
from orchestrator.services.audit import audit
from orchestrator.services.plan import BUNDLE_FORMAT, MANIFEST
from orchestrator.services.terraform import engine_for, instances_output, prepared_workdir
from orchestrator.services.workdir import ProviderWorkdir


@dataclass(frozen=True)
class AppliedProvider:
    """What one provider holds after the apply (key → {id, name, address, ...})."""

    name: str
    instances: dict[str, dict[str, Any]]


def read_manifest(bundle: Path, cluster: str) -> dict[str, Any]:
    """The bundle's manifest, checked against this configuration's cluster."""
    try:
        manifest: dict[str, Any] = json.loads((bundle / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"{bundle}: not a plan bundle (no {MANIFEST}); make one with xceprov plan --out"
        ) from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{bundle / MANIFEST}: unreadable: {exc}") from None
    if manifest.get("format") != BUNDLE_FORMAT:
        raise UsageError(f"{bundle / MANIFEST}: unsupported format {manifest.get('format')!r}")
    if manifest.get("cluster") != cluster:
        raise UsageError(
            f"{bundle}: planned for cluster {manifest.get('cluster')!r}, configuration is {cluster!r}"
        )
    return manifest


def apply_bundle(
    loaded: LoadedConfig, bundle: Path, toolkit_root: Path, engine: Engine | None = None
) -> list[AppliedProvider]:
    """Apply every provider plan in ``bundle``; stop at the first refusal."""
    config = loaded.config
    engine = engine or engine_for(config)
    manifest = read_manifest(bundle, config.cluster)
    applied: list[AppliedProvider] = []
    for entry in manifest["providers"]:
        name = entry["name"]
        if name not in config.providers:
            raise UsageError(f"{bundle}: provider {name!r} is not in the configuration")
        workdir = ProviderWorkdir(config, name, toolkit_root)
        plan_file = (bundle / entry["plan_file"]).resolve()
        prepared_workdir(engine, workdir)
        with workdir.lock():
            shown = engine.show_plan(workdir.path, plan_file)
            variables = {k: v.get("value") for k, v in shown.get("variables", {}).items()}
            previous = workdir.desired_file.read_bytes() if workdir.desired_file.exists() else None
            creates = sorted(
                rc.get("index") or rc.get("address")
                for rc in shown.get("resource_changes", [])
                if "create" in rc.get("change", {}).get("actions", [])
            )
            audit(config.state_dir, "apply", provider=name, bundle=str(bundle), create=creates)
            workdir.write_desired(variables)
            try:
                engine.apply(workdir.path, plan_file=plan_file)
            except StaleState:
                _restore(workdir, previous)
                audit(
                    config.state_dir, "apply-refused", provider=name, bundle=str(bundle), reason="stale plan"
                )
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


def _restore(workdir: ProviderWorkdir, previous: bytes | None) -> None:
    if previous is None:
        workdir.desired_file.unlink(missing_ok=True)
    else:
        workdir.desired_file.write_bytes(previous)
