"""``xceprov bootstrap [--op OP | HOST ...]``: re-run the bootstrap play by hand.

For providers of the simulated cloud the service fills in what a site would
(``services.bootstrap_sources``); this verb only hands it the simulated world's parts, since the
command line is the layer allowed to know the simulated world.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.cli.conventions import QUIET_HELP
from orchestrator.clients.ansible.hostkeys import Published
from orchestrator.durable import parse_json
from orchestrator.model.text import printable
from orchestrator.services.bootstrap_sources import SimulatedWorld


def simulated_world() -> SimulatedWorld:
    """The simulated world's key, node manager artifact and its builder, and its instances' consoles."""
    from orchestrator.sim import nodemanager
    from orchestrator.sim.hosts.console import console_output
    from orchestrator.sim.hosts.keys import toolkit_key
    from orchestrator.sim.nodemanager.artifact import ARTIFACT_NAME

    def console(sim_dir: Path, instance_id: str, latest: bool = False) -> Published | None:
        out = console_output(sim_dir, instance_id, latest=latest)
        return None if out is None else Published(out.instance_id, out.address, out.text)

    return SimulatedWorld(
        toolkit_key=toolkit_key,
        artifact=lambda sim_dir: sim_dir / "artifacts" / ARTIFACT_NAME,
        sources=Path(nodemanager.__file__).parent,
        build=nodemanager.build_artifact,
        console=console,
        console_latest=lambda sim_dir, instance_id: console(sim_dir, instance_id, latest=True),
        notices=sim_notices,
    )


_NOTICE_STORES: dict[Path, Any] = {}


def sim_notices(sim_dir: Path, tags: Mapping[str, str]) -> list[dict[str, object]]:
    """The pending interruption notices of the simulated cloud's live instances tagged ``tags``
    (and those reclaimed, ``reclaimed: true``, of the instances terminated in the last hour).
    Reading reclaims what is due: the cloud's own schedule, seen by any reader."""
    from orchestrator.sim.cloud.service import store_path
    from orchestrator.sim.cloud.store import CloudStore

    path = store_path(sim_dir)
    if not path.exists():
        return []
    store = _NOTICE_STORES.get(path)
    if store is None:  # one per store file: opening one checks the schema under the write lock
        store = _NOTICE_STORES[path] = CloudStore(path)
    found = store.list_instances(tags, include_terminated=True)
    ids = [i.id for i in found if i.state != "terminated" or i.state_reason == "spot-reclaim"]
    return [
        {
            "instance_id": n.instance_id,
            "kind": n.kind,
            "noticed_at": n.noticed_at,
            "reclaim_at": n.reclaim_at,
            "reclaimed": not n.pending,
            "detail": "xceprov sim fault spot-notice",
        }
        for n in store.list_notices(ids)
        if n.pending or (n.reclaimed_at or 0) > store.clock() - 3600
    ]


def _parse_extra(values: tuple[str, ...]) -> dict[str, object]:
    """``-e key=value`` pairs; values are read as JSON when they parse (lists, numbers, booleans)."""
    out: dict[str, object] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="-e")
        try:
            out[key] = parse_json(raw)  # nested thousands deep: not JSON that parses, so text
        except ValueError:
            out[key] = raw
    return out


@click.command("bootstrap")
@click.option("--op", metavar="OP", help="Only the instances of this op.")
@click.option("--decommission", is_flag=True, help="Run decommission.yml (drop the worker role) instead.")
@click.option("-e", "--extra-var", "extra", multiple=True, metavar="KEY=VALUE", help="Extra variable (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the per-host results as JSON.")
@click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)
@click.argument("hosts", nargs=-1, metavar="[HOST]...")
@pass_ctx
def bootstrap(
    ctx: CliContext,
    op: str | None,
    decommission: bool,
    extra: tuple[str, ...],
    as_json: bool,
    quiet: bool,
    hosts: tuple[str, ...],
) -> None:
    """Bootstrap provisioned hosts (all, one op's, or the named ones) and show a result per host.

    While the play runs, stderr shows hosts done and failed and a line per host (its state, its
    current task, its time; updated in place on a terminal, a line per change elsewhere; none
    with -q; per-task lines with -v); at the end stdout has one line per host (or the JSON
    document with --json). Ctrl-C stops the play after
    its current task (a second Ctrl-C at once); the hosts it did not finish show as stopped, and
    the exit status is 130.
    """
    from orchestrator.cli.interrupt import ctrl_c_stops_the_play
    from orchestrator.cli.progress import progress_view
    from orchestrator.errors import UsageError
    from orchestrator.paths import toolkit_root
    from orchestrator.services.bootstrap import bootstrap as run_bootstrap

    if op and hosts:
        raise UsageError("give either --op or host names, not both")

    loaded = ctx.config()
    # A task's own bound is the run's (ansible.timeout): past it the play is killed anyway.
    with (
        ctrl_c_stops_the_play(float(loaded.config.ansible.timeout)) as ctrl_c,
        progress_view(ctx.verbose, quiet) as view,
    ):
        result = run_bootstrap(
            loaded,
            toolkit_root(),
            world=simulated_world(),
            op=op,
            hosts=hosts,
            extra_vars=_parse_extra(extra),
            progress=view,
            playbook="decommission" if decommission else "bootstrap",
            stop=ctrl_c.stop,
        )
    if as_json:
        click.echo(json.dumps({h: vars(r) for h, r in sorted(result.hosts.items())}, indent=2))
    else:
        for r in sorted(result.hosts.values(), key=lambda r: r.host):
            click.echo(printable(r.describe()))
        click.echo(f"artifacts: {result.artifact_dir}")
    ctrl_c.raise_if_pressed()
    if result.failed:
        sys.exit(1)
