"""``xceprov validate``: everything that can be checked without touching a cloud.

Checks, in order: the configuration (already validated on load), every host template rendered
with sample values on every provider it names, every provider's Terraform root and
module (``terraform init`` from the local mirror and ``terraform validate`` on a throw-away
copy), with ``terraform.backend: pg`` the shared store's schema version (read only: one newer than
the toolkit is refused, as every other verb refuses it), and the playbooks (syntax check).
Returns one line per problem; an empty list means valid. One cloud read, which changes nothing:
a provider used before has its tagged image listing read, to warn when a template's baked image
is older than what a bake would make today (docs/images.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.engine import Engine
from orchestrator.clients.terraform.messages import Diagnostic
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import ConfigError, RegistryUnreachable, StoreUnavailable, TerraformError, XceprovError
from orchestrator.model.config import Config
from orchestrator.model.offerings import Placement
from orchestrator.render.environment import TemplateRenderer
from orchestrator.render.instances import (
    RenderRequest,
    controller_context,
    render_op,
    render_settings,
    renderer_for,
    template_dir_problems,
    worker_addresses,
)
from orchestrator.services.bootstrap_sources import SimulatedWorld
from orchestrator.services.images import stale_image_warnings
from orchestrator.services.missing_ca import missing_ca
from orchestrator.workspace.module_settings import settings_problems
from orchestrator.workspace.pgbackend import refuse_unmigrated
from orchestrator.workspace.pgsite import pg_site
from orchestrator.workspace.provider_lock import checked_init
from orchestrator.workspace.terraform import engine_for, root_label
from orchestrator.workspace.workdir import ProviderWorkdir

SAMPLE_OP = "op-00000000-000000"


@dataclass
class ValidationReport:
    """What was checked, what was wrong and what is not there yet (one line each)."""

    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Problems of a provider registry that could not be reached (in ``problems`` too): alone,
    # the exit code of an unreachable registry (75), as ``plan`` and ``apply`` give it.
    unreachable: list[str] = field(default_factory=list)

    def error(self) -> XceprovError | None:
        """What ``xceprov validate`` exits with: None when valid; ``RegistryUnreachable`` when
        an unreachable registry is the only problem, else ``ConfigError`` listing every problem."""
        if not self.problems:
            return None
        if set(self.problems) <= set(self.unreachable):
            return RegistryUnreachable("\n".join(self.problems))
        return ConfigError(self.problems)


def validate_all(
    loaded: LoadedConfig, toolkit_root: Path, engine: Engine | None = None, world: SimulatedWorld | None = None
) -> ValidationReport:
    """Run every check and collect their problems (``engine``: the configured one unless given;
    ``world``: the simulated world's node manager artifact, for the baked images' records)."""
    report = ValidationReport(checked=[f"configuration {loaded.source}"])
    config = loaded.config
    controller = _controller(loaded, report)
    dir_problems = template_dir_problems(config, loaded.source)
    report.problems.extend(dir_problems)
    if not dir_problems:
        # With a site template directory missing the templates are not rendered: the built-in
        # ones would stand in for the site's and say nothing about what a host would get.
        _render_templates(config, renderer_for(config, toolkit_root / "templates"), controller, report)
    report.problems.extend(settings_problems(config, toolkit_root, loaded.source))
    for pname in sorted(config.providers):
        try:
            render_settings(config, pname)
        except ConfigError as exc:
            report.problems.extend(exc.problems)
    engine = engine or engine_for(config)
    unlocked: set[Path] = set()
    for pname in sorted(config.providers):
        workdir = ProviderWorkdir(config, pname, toolkit_root)
        if not workdir.site_lock.is_file() and workdir.site_lock not in unlocked:
            unlocked.add(workdir.site_lock)
            report.warnings.append(
                f"terraform/roots/{workdir.module}: no provider lock ({workdir.site_lock}), so provider versions "
                "may move; xceprov terraform lock pins them"
            )
        try:
            problems = _validate_terraform(engine, workdir)
        except RegistryUnreachable as exc:
            problems = str(exc).splitlines()
            report.unreachable.extend(problems)
        if problems:
            report.problems.extend(problems)
        else:
            report.checked.append(
                f"terraform/roots/{workdir.module} + terraform/modules/{workdir.module} (provider {pname})"
            )
    try:
        refuse_unmigrated(config)
    except ConfigError as exc:
        report.problems.extend(exc.problems)
    report.problems.extend(_store_schema(loaded))
    if not report.problems:
        # Baked images older than a bake today: warnings, never problems (docs/images.md).
        report.warnings.extend(stale_image_warnings(loaded, toolkit_root, engine, world))
    for playbook in sorted((toolkit_root / "ansible" / "playbooks").glob("*.yml")):
        problem = _syntax_check(playbook, toolkit_root / "ansible")
        if problem is None:
            report.checked.append(f"playbook {playbook.relative_to(toolkit_root)}")
        else:
            report.problems.append(problem)
    return report


def _render_templates(
    config: Config, renderer: TemplateRenderer, controller: dict[str, Any], report: ValidationReport
) -> None:
    """Every host template rendered with sample values on every provider it names, one instance
    on each offering it lists (a ``select:`` template's come from the catalogue: rendered by the
    op that resolves them)."""
    for tname, template in sorted(config.templates.items()):
        for pname in sorted(template.providers):
            listed = template.providers[pname].listed_offerings(template.xce.slots)
            if not listed:
                report.checked.append(f"template {tname} on provider {pname} (select: rendered once resolved)")
                continue
            placements = [Placement(o.name, 1) for o in listed]
            try:
                request = RenderRequest(pname, tname, SAMPLE_OP, len(listed), placements=placements)
                render_op(config, renderer, request, controller)
                report.checked.append(f"template {tname} on provider {pname}")
            except ConfigError as exc:
                report.problems.extend(f"template {tname} on {pname}: {p}" for p in exc.problems)


def _controller(loaded: LoadedConfig, report: ValidationReport) -> dict[str, Any]:
    """The controller context templates render with; a bad CA file is a problem, a missing one
    a warning, as for ``plan`` (the simulated world makes its CA on ``sim up``; apply needs it)."""
    config = loaded.config
    ca = config.controller.ca
    if (missing := missing_ca(loaded)) is not None:
        report.warnings.append(f"{missing}; plan previews without it, apply needs it")
    try:
        context = controller_context(config, allow_missing_ca=True)
    except ConfigError as exc:
        report.problems.extend(exc.problems)
        # Templates are still checked, rendered without the CA.
        return {"addresses": worker_addresses(config), "ca_pem": None}
    if context["ca_pem"] is not None:
        report.checked.append(f"controller.ca {ca}: certificates only")
    return context


def _store_schema(loaded: LoadedConfig) -> list[str]:
    """The shared store's schema, read only: one newer than this toolkit knows is refused by
    every other verb, so it is a problem here too (the store is not migrated by a check)."""
    site = pg_site(loaded.config)
    if site is None:
        return []
    try:
        site.schema_version()
    except XceprovError as exc:
        return [str(exc)]
    return []


def _validate_terraform(engine: Engine, workdir: ProviderWorkdir) -> list[str]:
    """``terraform init`` + ``validate`` of a throw-away copy of the provider's configuration."""
    with tempfile.TemporaryDirectory(prefix="xceprov-validate-") as tmp:
        stage = Path(tmp)
        workdir.populate(stage)
        try:
            # With backend pg, the real backend of shard 0: validate proves the database answers.
            checked_init(engine, stage, root_label(workdir), workdir.site_lock, workdir.backend_config())
        except RegistryUnreachable:
            raise  # its own exit code: the caller keeps its lines apart
        except (TerraformError, StoreUnavailable) as exc:
            return str(exc).splitlines()
        return [
            f"{root_label(workdir)}: {_diagnostic_line(d)}" for d in engine.validate(stage) if d.severity == "error"
        ]


def _diagnostic_line(diagnostic: Diagnostic) -> str:
    where = f"{diagnostic.filename}:{diagnostic.line}: " if diagnostic.filename else ""
    detail = f": {diagnostic.detail}" if diagnostic.detail else ""
    return f"{where}{diagnostic.summary}{detail}"


def _syntax_check(playbook: Path, ansible_dir: Path) -> str | None:
    exe = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ansible_dir.parent / "ansible.cfg")}  # the toolkit root's
    proc = subprocess.run(
        [exe, "--syntax-check", "-i", "localhost,", str(playbook)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ansible_dir,
        timeout=120,
        check=False,
    )
    if proc.returncode == 0:
        return None
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip() and not ln.startswith("[WARNING]")]
    return f"{playbook}: syntax check failed: {lines[0] if lines else 'exit ' + str(proc.returncode)}"
