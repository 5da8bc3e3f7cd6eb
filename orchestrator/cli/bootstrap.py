"""``xceprov bootstrap [--op OP | HOST ...]``: re-run the bootstrap play by hand.

For providers of the simulated cloud (module ``xcesim``) the verb supplies what a site would:
the simulated world's toolkit SSH key when ``ansible.ssh_key`` is not set, and the simulated
node manager artifact (built into ``<sim_state_dir>/artifacts/`` when missing or older than its
sources) as the install source of the ``module_xcesim`` group. The CLI is the one layer allowed
to know the simulated world; the service only sees a key path and group variables.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.clients.ansible.runner import Progress
from orchestrator.configfile import LoadedConfig


def _simulated_world(loaded: LoadedConfig) -> tuple[LoadedConfig, dict[str, dict[str, Any]]]:
    """The key and the node manager source for hosts of the simulated cloud (see the docstring)."""
    config = loaded.config
    if not any(p.module == "xcesim" for p in config.providers.values()):
        return loaded, {}
    from orchestrator.sim.hosts.keys import toolkit_key
    from orchestrator.sim.nodemanager import build_artifact
    from orchestrator.sim.nodemanager.artifact import ARTIFACT_NAME

    sim_dir = config.sim_state_dir()
    key = toolkit_key(sim_dir)
    if config.ansible.ssh_key is None and key.exists():
        ansible = config.ansible.model_copy(update={"ssh_key": key})
        loaded = dataclasses.replace(loaded, config=config.model_copy(update={"ansible": ansible}))
    artifact = sim_dir / "artifacts" / ARTIFACT_NAME
    sources = Path(build_artifact.__code__.co_filename).parent
    newest = max(p.stat().st_mtime for p in sources.glob("*.py"))
    if not artifact.exists() or artifact.stat().st_mtime < newest:
        # Reproducible build (fixed times, sorted members): a rebuild of the same sources has the
        # same bytes, so the role's copy stays unchanged on hosts that have it.
        artifact = Path(build_artifact(artifact.parent))
    return loaded, {
        "module_xcesim": {
            "xce_node_manager_install_method": "artifact",
            "xce_node_manager_archive_src": str(artifact),
            # The artifact bundles pycapnp for this machine's CPython; hosts share its /usr.
            "xce_node_manager_interpreter": "/usr/bin/python3",
            "ansible_python_interpreter": "/usr/bin/python3",
        }
    }


def _parse_extra(values: tuple[str, ...]) -> dict[str, object]:
    """``-e key=value`` pairs; values are read as JSON when they parse (lists, numbers, booleans)."""
    out: dict[str, object] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="-e")
        try:
            out[key] = json.loads(raw)
        except ValueError:
            out[key] = raw
    return out


@click.command("bootstrap")
@click.option("--op", metavar="OP", help="Only the instances of this op.")
@click.option("--decommission", is_flag=True, help="Run decommission.yml (drop the worker role) instead.")
@click.option(
    "-e", "--extra-var", "extra", multiple=True, metavar="KEY=VALUE", help="Extra variable (repeatable)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the per-host results as JSON.")
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@pass_ctx
def bootstrap(
    ctx: CliContext,
    op: str | None,
    decommission: bool,
    extra: tuple[str, ...],
    as_json: bool,
    hosts: tuple[str, ...],
) -> None:
    """Bootstrap provisioned hosts (all, one op's, or the named ones) and show a result per host."""
    from orchestrator.errors import UsageError
    from orchestrator.paths import toolkit_root
    from orchestrator.services.bootstrap import bootstrap as run_bootstrap

    if op and hosts:
        raise UsageError("give either --op or host names, not both")

    def show(p: Progress) -> None:
        if not as_json:
            click.echo(f"  {p.host:<24} {p.status:<11} {p.task}", err=True)

    loaded, group_vars = _simulated_world(ctx.config())
    result = run_bootstrap(
        loaded,
        toolkit_root(),
        group_vars=group_vars,
        op=op,
        hosts=hosts,
        extra_vars=_parse_extra(extra),
        progress=show,
        playbook="decommission" if decommission else "bootstrap",
    )
    if as_json:
        click.echo(json.dumps({h: vars(r) for h, r in sorted(result.hosts.items())}, indent=2))
    else:
        for r in sorted(result.hosts.values(), key=lambda r: r.host):
            click.echo(r.describe())
        click.echo(f"artifacts: {result.artifact_dir}")
    if result.failed:
        sys.exit(1)
