"""``xceprov sim cloud ...`` and ``xceprov sim fault ...``: inspect the simulated cloud and inject faults.

The store is ``<sim_state_dir>/cloud.sqlite`` of the loaded configuration.

``xceprov sim cloud list --json`` prints one JSON object::

    {"store": "<path of cloud.sqlite>",
     "instances": [
       {"id": "i-0123456789ab", "name": "...", "flavor": "c8.large", "zone": "" | "<zone>",
        "subnet": "" | "<subnet>", "image": "debian-12",
        "tags": {"xce:cluster": "demo", ...}, "user_data": "...", "client_token": "<instance key>",
        "address": "10.213.0.2", "launch_time": "2026-01-02T03:04:05Z",
        "state": "running" | "stopped" | "terminated",
        "state_reason": "" | "user-terminate" | "out-of-band-delete" | "spot-reclaim" | "user-stop",
        "terminated_at": "" | "<RFC 3339>"}, ...]}

Instances are listed oldest first; terminated ones only with ``--all``.

``xceprov sim cloud mutations --json`` prints the mutation journal, oldest first::

    {"store": "<path of cloud.sqlite>",
     "mutations": [
       {"seq": 1, "time": "2026-01-02T03:04:05Z", "cluster": "demo", "provider": "sim",
        "action": "create" | "delete" | "update-tags" | "stop" | "start"
                  | "create-image" | "update-image-tags" | "delete-image",
        "instance_id": "i-0123456789ab" | "img-0123456789ab", "client_token": "<instance key>" | "",
        "epoch": "<term>.<seq>" | "none" | "",
        "reason": "" | "user-terminate" | "out-of-band-delete" | "spot-reclaim" | "expired"}, ...]}

``xceprov sim cloud images --json`` prints the images, oldest first (deleted ones only with ``--all``)::

    {"store": "<path of cloud.sqlite>",
     "images": [
       {"id": "img-0123456789ab", "name": "...", "instance_id": "i-0123456789ab",
        "source_image": "debian-12", "tags": {...}, "created_at": "<RFC 3339>",
        "state": "available" | "deleted", "deleted_at": "" | "<RFC 3339>"}, ...]}

``xceprov sim cloud requests --json [--since UNIX]`` prints the request journal, oldest first:
every create and delete request the cloud received, refused ones included
(``orchestrator/sim/cloud/requestlog.py``)::

    {"store": "<path of cloud.sqlite>",
     "requests": [
       {"seq": 1, "at": 1767323045.25, "action": "create" | "delete",
        "outcome": "created" | "existing" | "capacity" | "quota" | "error" | "deleted" | "absent",
        "flavor": "c8.large", "zone": "" | "<zone>", "subnet": "" | "<subnet>",
        "offering": "c8.large[@zone][@subnet]", "client_token": "<instance key>" | "",
        "instance_id": "i-0123456789ab" | "", "cluster": "demo", "provider": "sim",
        "epoch": "<term>.<seq>" | "none" | "", "detail": "" | "<the cloud's error>"}, ...]}

``xceprov sim cloud flavors --json`` prints the flavor catalogue, by name::

    {"store": "<path of cloud.sqlite>",
     "flavors": [
       {"name": "c8.large", "cpus": 8, "memory_gb": 32.0, "gpus": 0, "cost_per_hour": 0.34 | null,
        "zones": ["a", "b", "c"]}, ...]}

``xceprov sim cloud bill --json [--since WHEN] [--until WHEN]`` prints the cloud's own bill
(``orchestrator/sim/cloud/billing.py``): per instance, per second, at the catalogue's prices::

    {"store": "<path of cloud.sqlite>", "since": 0.0, "until": 1767323045.0,
     "instances": [
       {"instance_id": "i-0123456789ab", "name": "...", "flavor": "c8.large", "provider": "sim",
        "cluster": "demo", "running_seconds": 3600.0, "stopped_seconds": 0.0, "cost": 0.34,
        "unpriced": false}, ...],
     "total": {"cost": 0.34, "instances": 1, "running_seconds": 3600.0, "stopped_seconds": 0.0,
               "unpriced_flavors": []}}

``epoch`` is the fence of the Terraform run that made the change (``none`` standalone); "" for
the cloud's own actions (expiry, spot reclaim) and for this tooling. ``xceprov sim fault show
--json`` prints ``{"error_rate": 0.0, "seed": null, "slow_launch": 0.0, "capacity": {"<flavor>": N},
"zone_capacity": [{"flavor": "<flavor>", "zone": "<zone>", "limit": N}], "quota": null | N,
"lost_response": 0.0, "notices": [{"instance_id": "i-...", "kind": "spot-interruption",
"noticed_at": "<RFC 3339>", "reclaim_at": "<RFC 3339>", "reclaimed_at": "" | "<RFC 3339>"}, ...]}``;
``sim cloud list --json`` also holds ``"notices"``: the pending notices of the instances listed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.model.durations import period_of
from orchestrator.sim.cloud import billing_service, catalogue_service, service
from orchestrator.sim.cloud.store import CloudStore


def _store(ctx: CliContext) -> CloudStore:
    return CloudStore(service.store_path(ctx.config().config.sim_state_dir()))


class _Listed(Protocol):
    def to_json(self) -> dict[str, object]: ...


_L = TypeVar("_L", bound=_Listed)


def _show(
    store: CloudStore, key: str, found: Sequence[_L], as_json: bool, table: Callable[[Sequence[_L]], str]
) -> None:
    """Print a listing: ``{"store": ..., key: [...]}`` with ``--json``, else the table."""
    if as_json:
        doc = {"store": str(store.path), key: [item.to_json() for item in found]}
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        click.echo(table(found))


# The options every listing shares.
_JSON = click.option("--json", "as_json", is_flag=True, help="Machine-readable output (see the module docs).")
_TAGS = click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="Only with this tag (repeatable).")


@click.group()
def cloud() -> None:
    """Inspect the simulated cloud."""


@cloud.command("list")
@_JSON
@_TAGS
@click.option("--all", "include_terminated", is_flag=True, help="Include terminated instances.")
@pass_ctx
def list_cmd(ctx: CliContext, as_json: bool, tags: tuple[str, ...], include_terminated: bool) -> None:
    """List instances: id, name, flavor, state, address, launch time, owner tags."""
    store = _store(ctx)
    found = service.list_instances(store, tags, include_terminated)
    noticed = service.pending_notices(store)
    if as_json:
        listed = {i.id for i in found}
        doc = {
            "store": str(store.path),
            "instances": [i.to_json() for i in found],
            "notices": [n.to_json() for n in noticed.values() if n.instance_id in listed],
        }
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        click.echo(service.format_table(found, noticed))


@cloud.command("images")
@_JSON
@_TAGS
@click.option("--all", "include_deleted", is_flag=True, help="Include deleted images.")
@pass_ctx
def images_cmd(ctx: CliContext, as_json: bool, tags: tuple[str, ...], include_deleted: bool) -> None:
    """List images: id, name, state, the instance and image they were made from, owner tags."""
    store = _store(ctx)
    _show(store, "images", service.list_images(store, tags, include_deleted), as_json, service.format_images)


@cloud.command("mutations")
@_JSON
@click.option("--provider", default=None, metavar="PROVIDER", help="Only the mutations of this provider.")
@pass_ctx
def mutations_cmd(ctx: CliContext, as_json: bool, provider: str | None) -> None:
    """Show the mutation journal: every create, delete, tag update, stop, start and image change, with its epoch."""
    store = _store(ctx)
    _show(store, "mutations", service.list_mutations(store, provider), as_json, service.format_mutations)


@cloud.command("requests")
@_JSON
@click.option(
    "--since", default=None, metavar="WHEN", help="Only requests received since WHEN (a Unix time, or 30m, 2h: ago)."
)
@pass_ctx
def requests_cmd(ctx: CliContext, as_json: bool, since: str | None) -> None:
    """Show the request journal: every create and delete request, refused ones included, with its outcome."""
    store = _store(ctx)
    _show(store, "requests", store.requests(service.parse_since(since)), as_json, service.format_requests)


# Negative numbers ("-1") must reach our own validation, not click's "no such option".
_NUMBERS = {"ignore_unknown_options": True}


@cloud.command("flavors")
@_JSON
@pass_ctx
def flavors_cmd(ctx: CliContext, as_json: bool) -> None:
    """Show the flavor catalogue: cpus, memory, gpus, price and zones of each flavor."""
    store = _store(ctx)
    _show(store, "flavors", catalogue_service.flavors(store), as_json, catalogue_service.format_flavors)


@cloud.command("bill")
@_JSON
@click.option(
    "--since", default=None, metavar="WHEN", help="From WHEN (a Unix time, or 30m, 2h: ago); default: the beginning."
)
@click.option("--until", default=None, metavar="WHEN", help="Up to WHEN (same forms); default: now.")
@pass_ctx
def bill_cmd(ctx: CliContext, as_json: bool, since: str | None, until: str | None) -> None:
    """Show the cloud's own bill: per instance, per second, at the catalogue's prices, and the total."""
    start, end = period_of(since, until)
    store = _store(ctx)
    found = billing_service.bill(store, start, end)
    if as_json:
        click.echo(json.dumps({"store": str(store.path), **found.to_json()}, indent=2, ensure_ascii=False))
    else:
        click.echo(billing_service.format_bill(found))


@cloud.group("flavor")
def flavor_group() -> None:
    """Change the flavor catalogue (what the xcesim_flavors data source lists)."""


@flavor_group.command("set", context_settings=_NUMBERS)
@click.argument("name")
@click.option("--cpus", required=True, metavar="N", help="Virtual CPUs.")
@click.option("--memory-gb", "memory_gb", required=True, metavar="N", help="Memory in GB.")
@click.option("--gpus", default="0", show_default=True, metavar="N", help="GPUs.")
@click.option("--cost", default=None, metavar="COST", help="Price per hour (unset: the catalogue gives none).")
@click.option("--zone", "zones", multiple=True, metavar="ZONE", help="A zone it is offered in (repeatable).")
@pass_ctx
def flavor_set_cmd(
    ctx: CliContext, name: str, cpus: str, memory_gb: str, gpus: str, cost: str | None, zones: tuple[str, ...]
) -> None:
    """Add flavor NAME to the catalogue, or replace its entry."""
    flavor = catalogue_service.set_flavor(_store(ctx), name, cpus, memory_gb, gpus, cost, zones)
    click.echo(catalogue_service.format_flavors([flavor]))


@flavor_group.command("remove")
@click.argument("name")
@pass_ctx
def flavor_remove_cmd(ctx: CliContext, name: str) -> None:
    """Remove flavor NAME from the catalogue (its running instances stay)."""
    catalogue_service.remove_flavor(_store(ctx), name)
    click.echo(f"flavor {name} removed")


@click.group()
def fault() -> None:
    """Inject faults into the simulated cloud (seen by every provider process)."""


@fault.command("error-rate", context_settings=_NUMBERS)
@click.argument("rate")
@click.option("--seed", type=int, metavar="SEED", default=None, help="Make the sequence of failures deterministic.")
@pass_ctx
def error_rate_cmd(ctx: CliContext, rate: str, seed: int | None) -> None:
    """Fail each create/read/delete/stop/start with a retryable API error with probability RATE (0..1)."""
    click.echo(service.format_faults(service.set_error_rate(_store(ctx), rate, seed)))


@fault.command("lost-response", context_settings=_NUMBERS)
@click.argument("rate")
@pass_ctx
def lost_response_cmd(ctx: CliContext, rate: str) -> None:
    """Let each create succeed but lose its response with probability RATE (0..1)."""
    click.echo(service.format_faults(service.set_lost_response(_store(ctx), rate)))


@fault.command("capacity", context_settings=_NUMBERS)
@click.argument("flavor")
@click.argument("count", required=False, metavar="[N]")
@click.option(
    "--zone", default=None, metavar="ZONE", help="Limit FLAVOR in this zone only (default: every zone together)."
)
@click.option("--clear", is_flag=True, help="Remove the limit of FLAVOR (in --zone).")
@pass_ctx
def capacity_cmd(ctx: CliContext, flavor: str, count: str | None, zone: str | None, clear: bool) -> None:
    """Allow at most N live instances of FLAVOR, in every zone together or in --zone (or --clear the limit)."""
    click.echo(service.format_faults(service.set_capacity(_store(ctx), flavor, count, clear, zone)))


@fault.command("quota", context_settings=_NUMBERS)
@click.argument("count", required=False, metavar="[N]")
@click.option("--clear", is_flag=True, help="Lift the quota.")
@pass_ctx
def quota_cmd(ctx: CliContext, count: str | None, clear: bool) -> None:
    """Allow the account at most N live instances, every flavor (or --clear the quota): InstanceLimitExceeded beyond."""
    click.echo(service.format_faults(service.set_quota(_store(ctx), count, clear)))


@fault.command("slow-launch", context_settings=_NUMBERS)
@click.argument("seconds")
@pass_ctx
def slow_launch_cmd(ctx: CliContext, seconds: str) -> None:
    """Add SECONDS to every create and start (0 turns it off)."""
    click.echo(service.format_faults(service.set_slow_launch(_store(ctx), seconds)))


@fault.command("delete")
@click.argument("instance_id", metavar="ID")
@pass_ctx
def delete_cmd(ctx: CliContext, instance_id: str) -> None:
    """Terminate instance ID behind Terraform's back."""
    inst = service.delete_out_of_band(_store(ctx), instance_id)
    click.echo(f"{inst.id} {inst.state} ({inst.state_reason or 'already'})")


@fault.command("create")
@click.option("--name", required=True, metavar="NAME", help="Instance name.")
@click.option("--flavor", required=True, metavar="FLAVOR", help="Flavor (instance type).")
@click.option("--image", required=True, metavar="IMAGE", help="Image.")
@click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE", help="A tag (repeatable).")
@pass_ctx
def create_cmd(ctx: CliContext, name: str, flavor: str, image: str, tags: tuple[str, ...]) -> None:
    """Launch an instance Terraform never made (an orphan candidate)."""
    inst = service.create_out_of_band(_store(ctx), name, flavor, image, tags)
    click.echo(f"{inst.id} {inst.address} {inst.state}")


@fault.command("spot-reclaim")
@click.argument("instance_id", metavar="[ID]", required=False)
@click.option("--flavor", default=None, metavar="FLAVOR", help="Reclaim every running instance of this flavor.")
@pass_ctx
def spot_reclaim_cmd(ctx: CliContext, instance_id: str | None, flavor: str | None) -> None:
    """Reclaim instance ID, or every running instance of --flavor (reason spot-reclaim)."""
    reclaimed = service.spot_reclaim(_store(ctx), instance_id, flavor)
    for inst in reclaimed:
        click.echo(f"{inst.id} {inst.state} ({inst.state_reason})")
    if not reclaimed:
        click.echo("no running instance reclaimed")


@fault.command("spot-notice")
@click.argument("instance_id", metavar="[ID]", required=False)
@click.option("--flavor", default=None, metavar="FLAVOR", help="Notice every running instance of this flavor.")
@click.option(
    "--lead",
    default="120s",
    show_default=True,
    metavar="DURATION",
    help="How long before the reclaim the notice comes.",
)
@pass_ctx
def spot_notice_cmd(ctx: CliContext, instance_id: str | None, flavor: str | None, lead: str) -> None:
    """Give instance ID, or every running instance of --flavor, an interruption notice; the cloud
    reclaims it (reason spot-reclaim) --lead later."""
    noticed = service.spot_notice(_store(ctx), instance_id, flavor, lead)
    for n in noticed:
        click.echo(f"{n.instance_id} noticed {n.to_json()['noticed_at']}, reclaim at {n.to_json()['reclaim_at']}")
    if not noticed:
        click.echo("no running instance noticed")


@fault.command("show")
@_JSON
@pass_ctx
def show_cmd(ctx: CliContext, as_json: bool) -> None:
    """Show the fault controls in force and the interruption notices given."""
    store = _store(ctx)
    faults, notices = store.faults(), store.list_notices()
    if as_json:
        click.echo(json.dumps({**faults.to_json(), "notices": [n.to_json() for n in notices]}))
    else:
        click.echo(service.format_faults(faults) + "\n" + service.format_notices(notices))


@fault.command("clear")
@pass_ctx
def clear_cmd(ctx: CliContext) -> None:
    """Remove every fault control (error rate, lost responses, slow launches, capacity limits, quota)."""
    store = _store(ctx)
    store.clear_faults()
    click.echo(service.format_faults(store.faults()))
