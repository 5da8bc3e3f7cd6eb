"""``xceprov plan TEMPLATE=N ...``: preview a burst as a real Terraform plan."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from orchestrator.cli.context import CliContext, pass_ctx

if TYPE_CHECKING:
    from orchestrator.services.plan import BurstPlan, PlannedInstance, ProviderPlan


@click.command("plan")
@click.argument("requests", nargs=-1, required=True, metavar="TEMPLATE=N...")
@click.option("--provider", metavar="PROVIDER", help="Plan on this provider only (default: by priority and room).")
@click.option("--json", "as_json", is_flag=True, help="Print the documented JSON document (docs/plan-json.md).")
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    metavar="BUNDLE",
    help="Save the plans in this new directory for `xceprov apply`.",
)
@pass_ctx
def plan(ctx: CliContext, requests: tuple[str, ...], provider: str | None, as_json: bool, out: Path | None) -> None:
    """Show what a burst would create, cost and tag, and what the cloud lost; changes nothing, needs no lease."""
    from orchestrator.reconcile.policy import parse_requests
    from orchestrator.services.plan import plan_burst

    result = plan_burst(ctx.config(), parse_requests(requests), provider=provider, out=out)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        print_plan(result, Console())


def print_plan(result: BurstPlan, console: Console) -> None:
    """The human table: per provider and template, counts, names, cost; then the tags."""
    table = Table(title=f"Burst preview, cluster {result.cluster} (nothing was changed)", title_justify="left")
    numbers = ("add", "change", "destroy", "lost", "cost/h")
    for column in ("provider", "template", *numbers, "names"):
        table.add_column(column, justify="right" if column in numbers else "left")
    tag_lines: list[str] = []
    lost_lines: list[str] = []
    for prov in result.providers:
        groups: dict[str, list[PlannedInstance]] = defaultdict(list)
        for inst in prov.instances:
            groups[inst.template].append(inst)
        lost = Counter(item.template for item in prov.lost)
        for template in lost:
            groups.setdefault(template, [])  # a template whose only news is a loss still gets its row
        lost_lines += lost_instance_lines(prov)
        for template, items in sorted(groups.items()):
            add = sum(1 for i in items if i.action in ("create", "replace"))
            change = sum(1 for i in items if i.action == "update")
            destroy = sum(1 for i in items if i.action in ("delete", "replace"))
            names = [i.name for i in items if i.name]
            shown = ", ".join(names) if len(names) <= 3 else f"{names[0]} … {names[-1]} ({len(names)})"
            cost = prov.cost_by_template.get(template, 0.0)
            counts = (add, change, destroy, lost[template])
            table.add_row(prov.name, template or "?", *map(str, counts), f"{cost:.2f}", shown)
        for op in prov.ops:
            sample = next((i for i in prov.instances if i.key.startswith(op["op_id"])), None)
            if sample is not None:
                tags = " ".join(f"{k}={v}" for k, v in sorted(sample.tags.items()))
                rounded = f" (asked {op['asked']}, granularity)" if op["count"] != op["asked"] else ""
                tag_lines.append(f"{prov.name}/{op['template']} op {op['op_id']}{rounded}: {tags}")
    console.print(table)
    for line in offering_lines(result):
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    for line in lost_lines:
        console.print(line, highlight=False, soft_wrap=True, markup=False)
    for line in tag_lines:
        console.print(f"tags {line}", highlight=False, soft_wrap=True)
    console.print(f"added cost: {result.cost_per_hour:.2f} per hour", highlight=False, soft_wrap=True)
    if result.out:
        console.print(
            f"saved plan: {result.out} (apply it with: xceprov apply {result.out})", highlight=False, soft_wrap=True
        )


def lost_instance_lines(prov: ProviderPlan) -> list[str]:
    """One line per instance the preview shows lost (docs/operations.md, "Previews and host loss")."""
    return [
        f"lost {prov.name}/{item.template or '?'} {item.name or '?'} ({item.key}, {item.instance_id}, "
        f"{item.reason}): apply records it lost and never re-creates it"
        for item in prov.lost
    ]


def offering_lines(result: BurstPlan) -> list[str]:
    """One line per offering the burst creates instances on: how many, as what, where, the cost."""
    lines: list[str] = []
    for prov in result.providers:
        made: dict[tuple[str, str], list[PlannedInstance]] = defaultdict(list)
        for inst in prov.instances:
            if inst.action == "create" and inst.offering:
                made[(inst.template, inst.offering)].append(inst)
        for (template, offering), items in sorted(made.items()):
            first = items[0]
            where = "".join(
                f" {what} {value}" for what, value in (("zone", first.zone), ("subnet", first.subnet)) if value
            )
            cost = prov.cost_by_offering.get(template, {}).get(offering, 0.0)
            lines.append(
                f"offering {prov.name}/{template} {offering}: {len(items)} × {first.flavor}{where}, "
                f"{first.cost_per_hour:.2f} each, {cost:.2f} per hour"
            )
    return lines
