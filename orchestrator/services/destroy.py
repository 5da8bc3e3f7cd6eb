"""``xceprov destroy``: return instances the toolkit made, by op or all of a provider.

Only instances in the provider's desired set (made by this toolkit, in this cluster's working
directory) can be named; nothing else in the cloud is ever touched. The removal is planned
first and shown; ``dry_run`` stops there. A run refuses to destroy more than ``max_destroy``
instances unless raised explicitly. The intent (the smaller desired set) is written and audited
before Terraform is asked to destroy anything.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import UsageError
from orchestrator.model.instances import op_of_key
from orchestrator.render.instances import render_settings
from orchestrator.workspace.audit import audit
from orchestrator.workspace.terraform import engine_for, prepared_workdir
from orchestrator.workspace.workdir import ProviderWorkdir


@dataclass
class DestroyResult:
    """Per provider: the instance keys planned for removal and whether they were removed."""

    dry_run: bool
    removed: dict[str, list[str]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)


def destroy(
    loaded: LoadedConfig,
    toolkit_root: Path,
    ops: Sequence[str] = (),
    all_instances: bool = False,
    provider: str | None = None,
    dry_run: bool = False,
    max_destroy: int = 50,
    engine: Engine | None = None,
) -> DestroyResult:
    """Remove the instances of ``ops`` (or every instance with ``all_instances``)."""
    config = loaded.config
    if not ops and not all_instances:
        raise UsageError("name what to destroy: --op OP (repeatable) or --all")
    if provider is not None and provider not in config.providers:
        raise UsageError(
            f"--provider {provider}: no such provider (known: {', '.join(sorted(config.providers))})"
        )
    engine = engine or engine_for(config)
    providers = [provider] if provider else sorted(config.providers)
    selected: dict[str, tuple[ProviderWorkdir, dict[str, object], list[str]]] = {}
    result = DestroyResult(dry_run=dry_run)
    found_ops: set[str] = set()
    for name in providers:
        workdir = ProviderWorkdir(config, name, toolkit_root)
        desired = workdir.desired.read()
        keys = sorted(k for k in desired if all_instances or op_of_key(k) in ops)
        found_ops.update(op_of_key(k) for k in keys)
        if keys:
            remaining = {k: v for k, v in desired.items() if k not in keys}
            variables = workdir.variables(remaining, render_settings(config, name))
            selected[name] = (workdir, variables, keys)
            result.names.update({k: desired[k].name for k in keys})
    missing = sorted(set(ops) - found_ops)
    if missing:
        raise UsageError(f"--op {', '.join(missing)}: no instances of that op in this cluster's desired sets")
    total = sum(len(keys) for _, _, keys in selected.values())
    if total > max_destroy and not dry_run:
        raise UsageError(
            f"would destroy {total} instances, more than --max {max_destroy}; raise --max to allow it"
        )
    for name, (workdir, variables, keys) in selected.items():
        result.removed[name] = keys
        audit(config.state_dir, "destroy-dry-run" if dry_run else "destroy", provider=name, keys=keys)
        if dry_run:
            continue
        prepared_workdir(engine, workdir)
        with workdir.lock(), tempfile.TemporaryDirectory(prefix="xceprov-destroy-") as tmp:
            plan_file = Path(tmp) / "destroy.tfplan"
            with workdir.candidate_var_file(variables) as var_file:
                engine.plan(workdir.path, var_files=[var_file], out=plan_file)
            workdir.desired.write(variables)
            engine.apply(workdir.path, plan_file=plan_file)
        audit(config.state_dir, "destroyed", provider=name, keys=keys)
    return result
