"""What ``xceprov sim cloud`` and ``xceprov sim fault`` do, apart from argument parsing.

Every function takes the store (or its path) and plain values and raises
``orchestrator.errors.UsageError`` with one line for bad input, so that the click functions in
``orchestrator/cli/sim_cloud.py`` stay one call each.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Final

from orchestrator.errors import UsageError
from orchestrator.model import tags as owner
from orchestrator.model.durations import WHEN_FORMS, parse_duration, since_time
from orchestrator.sim.cloud.errors import CloudError
from orchestrator.sim.cloud.faults import FaultSettings
from orchestrator.sim.cloud.notices import Notice
from orchestrator.sim.cloud.records import Image, Instance, Mutation, rfc3339
from orchestrator.sim.cloud.requestlog import Request
from orchestrator.sim.cloud.store import CloudStore

STORE_NAME: Final = "cloud.sqlite"


def store_path(sim_state_dir: Path) -> Path:
    """Path of the cloud store inside the simulated world's state directory."""
    return sim_state_dir / STORE_NAME


def parse_tags(pairs: Iterable[str]) -> dict[str, str]:
    """``["k=v", ...]`` → ``{"k": "v"}``; the value may hold ``=``; the key may not be empty."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"bad tag {pair!r}: expected KEY=VALUE")
        out[key] = value
    return out


def parse_rate(text: str) -> float:
    """A probability between 0 and 1."""
    try:
        rate = float(text)
    except ValueError:
        raise UsageError(f"bad error rate {text!r}: expected a number between 0 and 1") from None
    if not 0.0 <= rate <= 1.0 or math.isnan(rate):
        raise UsageError(f"bad error rate {text!r}: expected a number between 0 and 1")
    return rate


def parse_seconds(text: str) -> float:
    """A non-negative number of seconds."""
    try:
        seconds = float(text)
    except ValueError:
        raise UsageError(f"bad duration {text!r}: expected seconds (0 or more)") from None
    if not seconds >= 0 or math.isinf(seconds):
        raise UsageError(f"bad duration {text!r}: expected seconds (0 or more)")
    return seconds


def parse_count(text: str) -> int:
    """A non-negative whole number."""
    try:
        count = int(text)
    except ValueError:
        raise UsageError(f"bad count {text!r}: expected a whole number (0 or more)") from None
    if count < 0:
        raise UsageError(f"bad count {text!r}: expected a whole number (0 or more)")
    return count


def list_instances(store: CloudStore, tag_pairs: Sequence[str], include_terminated: bool) -> list[Instance]:
    """Instances matching every ``k=v`` of ``tag_pairs`` (live only unless ``include_terminated``)."""
    return store.list_instances(parse_tags(tag_pairs), include_terminated=include_terminated)


def list_images(store: CloudStore, tag_pairs: Sequence[str], include_deleted: bool) -> list[Image]:
    """Images matching every ``k=v`` of ``tag_pairs`` (available only unless ``include_deleted``)."""
    return store.list_images(parse_tags(tag_pairs), include_deleted=include_deleted)


def format_images(images: Sequence[Image]) -> str:
    """The ``xceprov sim cloud images`` table: one line per image under a header."""
    header = ("ID", "NAME", "STATE", "INSTANCE", "SOURCE", "CREATED", "OWNER")
    rows: list[tuple[str, ...]] = [header]
    for image in images:
        cells = (image.id, image.name, image.state, image.instance_id, image.source_image, image.created_at)
        rows.append(tuple(_cell(c) for c in (*cells, _owner(image.tags))))
    return aligned(rows)


def set_error_rate(store: CloudStore, rate: str, seed: int | None) -> FaultSettings:
    """Set the API error rate (and optional seed); returns the new fault settings."""
    store.set_error_rate(parse_rate(rate), seed)
    return store.faults()


def set_lost_response(store: CloudStore, rate: str) -> FaultSettings:
    """Set the probability that a create succeeds but its response is lost."""
    try:
        store.set_lost_response(parse_rate(rate))
    except UsageError as exc:
        raise UsageError(str(exc).replace("error rate", "lost response rate")) from None
    return store.faults()


def set_capacity(
    store: CloudStore, flavor: str, count: str | None, clear: bool, zone: str | None = None
) -> FaultSettings:
    """Limit live instances of ``flavor`` (in ``zone``, or every zone together) to ``count`` or,
    with ``clear``, remove that limit."""
    if not flavor:
        raise UsageError("capacity needs a flavor name")
    if zone is not None and not zone:
        raise UsageError("--zone needs a zone name")
    if clear == (count is not None):
        raise UsageError("capacity needs either a count or --clear")
    store.set_capacity(flavor, None if clear else parse_count(count or ""), zone or "")
    return store.faults()


def set_quota(store: CloudStore, count: str | None, clear: bool) -> FaultSettings:
    """Limit the account's live instances (every flavor) to ``count`` or, with ``clear``, lift the quota."""
    if clear == (count is not None):
        raise UsageError("quota needs either a count or --clear")
    store.set_quota(None if clear else parse_count(count or ""))
    return store.faults()


def set_slow_launch(store: CloudStore, seconds: str) -> FaultSettings:
    """Add ``seconds`` to every create."""
    store.set_slow_launch(parse_seconds(seconds))
    return store.faults()


def delete_out_of_band(store: CloudStore, instance_id: str) -> Instance:
    """Terminate an instance behind Terraform's back; an unknown id is a usage error."""
    try:
        return store.delete_out_of_band(instance_id)
    except CloudError as exc:
        raise UsageError(f"no instance {instance_id} in the simulated cloud") from exc


def create_out_of_band(
    store: CloudStore, name: str, flavor: str, image: str, tag_pairs: Sequence[str], user_data: str = ""
) -> Instance:
    """Launch an instance Terraform never made; capacity errors become one usage line."""
    for what, value in (("--name", name), ("--flavor", flavor), ("--image", image)):
        if not value:
            raise UsageError(f"create needs a non-empty {what}")
    tags = parse_tags(tag_pairs)
    try:
        return store.create_out_of_band(name, flavor, image, tags, user_data=user_data)
    except CloudError as exc:
        raise UsageError(str(exc)) from exc


def spot_reclaim(store: CloudStore, instance_id: str | None, flavor: str | None) -> list[Instance]:
    """Reclaim one running instance or every running instance of a flavor."""
    if (instance_id is None) == (flavor is None):
        raise UsageError("spot-reclaim needs exactly one of an instance ID or --flavor")
    if instance_id is not None:
        inst = store.get_unfaulted(instance_id)
        if inst is None:
            raise UsageError(f"no instance {instance_id} in the simulated cloud")
        if inst.state != "running":
            raise UsageError(f"instance {instance_id} is {inst.state}, not running")
    return store.spot_reclaim(instance_id=instance_id, flavor=flavor)


def spot_notice(store: CloudStore, instance_id: str | None, flavor: str | None, lead: str) -> list[Notice]:
    """Give one running instance, or every running instance of a flavor, an interruption notice:
    the cloud reclaims it ``lead`` (a duration: ``120``, ``90s``, ``2m``) from now."""
    if (instance_id is None) == (flavor is None):
        raise UsageError("spot-notice needs exactly one of an instance ID or --flavor")
    try:
        seconds = parse_duration(lead)
    except ValueError as exc:
        raise UsageError(f"bad --lead {lead!r}: {exc}") from None
    if instance_id is not None:
        inst = store.get_unfaulted(instance_id)
        if inst is None:
            raise UsageError(f"no instance {instance_id} in the simulated cloud")
        if inst.state != "running":
            raise UsageError(f"instance {instance_id} is {inst.state}, not running")
    elif not flavor:
        raise UsageError("--flavor needs a flavor name")
    return store.spot_notice(instance_id=instance_id, flavor=flavor, lead=seconds)


def pending_notices(store: CloudStore) -> dict[str, Notice]:
    """Instance id -> its notice not yet reclaimed (what ``sim cloud list`` shows)."""
    return {n.instance_id: n for n in store.list_notices() if n.pending}


def format_notices(found: Sequence[Notice]) -> str:
    """Notices as lines under the fault settings (``sim fault show``)."""
    if not found:
        return f"{'notices:':<15}none"
    lines = [f"{'notices:':<15}{len(found)}"]
    for n in found:
        done = f"reclaimed {rfc3339(n.reclaimed_at)}" if n.reclaimed_at is not None else "pending"
        lines.append(
            f"  {_cell(n.instance_id)}  noticed {rfc3339(n.noticed_at)}  reclaim {rfc3339(n.reclaim_at)}  {done}"
        )
    return "\n".join(lines)


_OWNER_SHORT: Final = {
    owner.CLUSTER: "cluster",
    owner.PROVIDER: "provider",
    owner.OP_ID: "op",
    owner.EPOCH: "epoch",
    owner.TEMPLATE: "template",
    owner.MAX_LIFETIME: "lifetime",
}


def owner_summary(inst: Instance) -> str:
    """The owner tags of an instance in short form (``cluster=demo provider=sim op=... ...``)."""
    return _owner(inst.tags)


def _owner(tags: Mapping[str, str]) -> str:
    parts = [f"{short}={tags[key]}" for key, short in _OWNER_SHORT.items() if key in tags]
    return " ".join(parts) if parts else "-"


def format_table(instances: Sequence[Instance], noticed: Mapping[str, Notice] | None = None) -> str:
    """The ``xceprov sim cloud list`` table: one line per instance under a header (an instance
    with a pending interruption notice says when it is reclaimed)."""
    header = ("ID", "NAME", "FLAVOR", "ZONE", "SUBNET", "STATE", "ADDRESS", "LAUNCHED", "OWNER")
    rows: list[tuple[str, ...]] = [header]
    for inst in instances:
        state = inst.state if not inst.state_reason else f"{inst.state} ({inst.state_reason})"
        notice = (noticed or {}).get(inst.id)
        if notice is not None:
            state += f" (reclaim {rfc3339(notice.reclaim_at)})"
        place = (inst.zone or "-", inst.subnet or "-")
        cells = (inst.id, inst.name, inst.flavor, *place, state, inst.address, inst.launch_time, owner_summary(inst))
        rows.append(tuple(_cell(c) for c in cells))
    return aligned(rows)


def list_mutations(store: CloudStore, provider: str | None) -> list[Mutation]:
    """The cloud's mutation journal, oldest first (of one ``provider`` when given)."""
    if provider is not None and not provider:
        raise UsageError("--provider needs a provider name")
    return store.mutations(provider=provider)


def format_mutations(mutations: Sequence[Mutation]) -> str:
    """The ``xceprov sim cloud mutations`` table: one line per mutation under a header."""
    header = ("SEQ", "TIME", "PROVIDER", "ACTION", "INSTANCE", "KEY", "EPOCH", "REASON")
    rows: list[tuple[str, ...]] = [header]
    for m in mutations:
        doc = m.to_json()
        cells = (str(m.seq), str(doc["time"]), m.provider, m.action, m.instance_id, m.client_token, m.epoch, m.reason)
        rows.append(tuple(_cell(c or "-") for c in cells))
    return aligned(rows)


def parse_since(text: str | None, now: float | None = None) -> float:
    """A Unix time in seconds, or a duration back from ``now`` (0 or more; ``None``: from the start)."""
    if text is None:
        return 0.0
    try:
        since = since_time(text, time.time() if now is None else now)
    except ValueError:
        raise UsageError(f"bad --since {text!r}: expected {WHEN_FORMS}") from None
    if not since >= 0:
        raise UsageError(f"bad --since {text!r}: expected {WHEN_FORMS}")
    return since


def format_requests(requests: Sequence[Request]) -> str:
    """The ``xceprov sim cloud requests`` table: one line per request under a header."""
    header = ("SEQ", "TIME", "ACTION", "OUTCOME", "OFFERING", "KEY", "INSTANCE", "PROVIDER", "DETAIL")
    rows: list[tuple[str, ...]] = [header]
    for r in requests:
        cells = (
            str(r.seq),
            rfc3339(r.at),
            r.action,
            r.outcome,
            r.offering,
            r.client_token,
            r.instance_id,
            r.provider,
            r.detail,
        )
        rows.append(tuple(_cell(c or "-") for c in cells))
    return aligned(rows)


def aligned(rows: Sequence[tuple[str, ...]]) -> str:
    # Every column but the last padded to its widest cell.
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def _cell(text: str) -> str:
    # A hostile name or tag (newline, escape sequence) must not break the table or the terminal.
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def format_faults(faults: FaultSettings) -> str:
    """Fault settings as short human-readable lines."""
    seed = "" if faults.seed is None else f" (seed {faults.seed})"
    limits = [f"{f}={n}" for f, n in sorted(faults.capacity.items())]
    limits += [f"{f}@{z}={n}" for (f, z), n in sorted(faults.zone_capacity.items())]
    rows = [
        ("error rate", f"{faults.error_rate:g}{seed}"),
        ("lost response", f"{faults.lost_response:g}"),
        ("slow launch", f"{faults.slow_launch:g} s"),
        ("capacity", ", ".join(limits) or "unlimited"),
        ("quota", "none" if faults.quota is None else f"{faults.quota} live instances"),
    ]
    return "\n".join(f"{label + ':':<15}{value}" for label, value in rows)
