"""The orphan classes, each found from the pass's inputs with its evidence (no I/O here).

* (a) requested, never joined: an expected host past its join deadline that the controller never
  saw join (state ``expected``/``overdue``, no join time) → return through the executor;
* (b) tagged in the cloud, no fact: a live object with this cluster's and this provider's tags
  that no fact names → adopt when it matches a live host (instance id, host name, address),
  else report (stop or terminate only when ``orphan_action`` says so, after ``orphan_grace``).
  An object whose ``xce:op_id`` is an op still in flight is never (b): its facts are coming;
* (c) ghost: a fact with no cloud object, the drift showing it deleted on two consecutive reads
  (or the listing showing the cloud ended it) → retirement through the host-loss path;
* (d) borrowed licence not returned: licences are not provisioned yet, so the class is never
  found (the report says it was not scanned);
* (e) bake leftover (docs/images.md): a bake's builder instance (``xce:kind=builder``) still in
  the cloud, or a baked image (``xce:kind=image``) that no desired set keeps, of no op in
  flight → always report only, never deleted by the scan (``xceprov return`` a builder,
  ``xceprov image delete`` an image).

An object without this cluster's tag or this provider's tag is not ours: it is never a finding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from orchestrator.clients.controller.types import HostInfo
from orchestrator.model import tags as owner
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.images import KIND, KIND_BUILDER, BakedImage, image_key
from orchestrator.ops.hostloss import LostInstance
from orchestrator.ops.openops import open_ops
from orchestrator.reconcile.ledger import InstanceRecord, ledger
from orchestrator.workspace.cloudview import CloudObject

CLASS_A: Final = "a"
CLASS_B: Final = "b"
CLASS_C: Final = "c"
CLASS_D: Final = "d"
CLASS_E: Final = "e"
CLASS_NAMES: Final = {
    CLASS_A: "requested, never joined",
    CLASS_B: "tagged in the cloud, no fact",
    CLASS_C: "ghost: a fact with no cloud object",
    CLASS_D: "borrowed licence not returned",
    CLASS_E: "bake leftover: a builder or image with no live op",
}

# The policy's actions (docs/orphans-json.md).
RETURN: Final = "return"
ADOPT: Final = "adopt"
REPORT: Final = "report"
RETIRE: Final = "retire"
TERMINATE: Final = "terminate"

# Host states of a worker that joined and may run work: a match makes a (b) object adoptable.
LIVE_HOST_STATES: Final = frozenset({"idle", "busy", "closing", "closed", "disconnected"})
# Host states of a host that never joined (``overdue``: past its deadline, as the controller says).
NEVER_JOINED_STATES: Final = frozenset({"expected", "overdue"})
# Cloud states of an object that exists (and costs money).
LIVE_CLOUD_STATES: Final = frozenset({"pending", "running", "stopping", "stopped", "active", "shutting-down"})


@dataclass
class Finding:
    """One disagreement between the views, with what the policy does about it."""

    cls: str
    provider: str
    object_id: str
    action: str
    instance_key: str = ""
    op_id: str = ""
    name: str = ""
    address: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    launch_time: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    # "taken" | "skipped" | "would-take" (act=False or dry run) | "reported" | "failed"
    outcome: str = ""
    reason: str = ""
    shard: int = 0
    adopt_host: str = ""
    lost: LostInstance | None = None

    def to_json(self) -> dict[str, Any]:
        """The finding as documented in docs/orphans-json.md."""
        return {
            "class": self.cls,
            "class_name": CLASS_NAMES[self.cls],
            "provider": self.provider,
            "object_id": self.object_id,
            "instance_key": self.instance_key,
            "op_id": self.op_id,
            "name": self.name,
            "address": self.address,
            "tags": dict(self.tags),
            "launch_time": self.launch_time,
            "evidence": self.evidence,
            "action": self.action,
            "outcome": self.outcome,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class FactIndex:
    """What one provider's facts say, indexed for the classes."""

    records: dict[str, InstanceRecord]
    in_flight: frozenset[str]  # op ids with an intent and no complete outcome
    known_ids: frozenset[str]  # cloud ids some live fact names (created, expected, adopted)
    deadlines: dict[str, float]  # instance key → join deadline of its expectedHost fact
    returning: frozenset[str]  # instance keys of open return ops

    @classmethod
    def of(cls, facts: Sequence[Fact]) -> FactIndex:
        """Index ``facts`` (one provider's)."""
        records = ledger(facts)
        gone_keys = {k for k, r in records.items() if r.gone}
        opened = open_ops(facts)
        live_ids = {
            f.instance_id
            for f in facts
            if f.instance_id
            and f.kind in (FactKind.INSTANCE_CREATED, FactKind.EXPECTED_HOST, FactKind.ORPHAN_ADOPTED)
            and f.instance_key not in gone_keys
        }
        return cls(
            records=records,
            in_flight=frozenset(o.op_id for o in opened),
            known_ids=frozenset(live_ids),
            deadlines={f.instance_key: f.join_deadline for f in facts if f.kind == FactKind.EXPECTED_HOST},
            returning=frozenset(k for o in opened if o.kind == "return" for k in o.pending),
        )


def ours(obj: CloudObject, cluster: str, provider: str) -> bool:
    """Carries this cluster's and this provider's owner tags (anything else is never touched)."""
    return obj.tags.get(owner.CLUSTER) == cluster and obj.tags.get(owner.PROVIDER) == provider


def host_index(hosts: Iterable[HostInfo]) -> dict[str, HostInfo]:
    """Hosts by instance key and by instance id."""
    out: dict[str, HostInfo] = {}
    for host in hosts:
        for ref in (host.instance_key, host.instance_id):
            if ref:
                out[ref] = host
    return out


def never_joined(
    provider: str,
    index: FactIndex,
    hosts: Sequence[HostInfo],
    listed: Mapping[str, CloudObject],
    now: float,
    missing: frozenset[str] = frozenset(),
) -> list[Finding]:
    """Class (a): expected hosts past their join deadline that the controller never saw join.

    ``missing``: keys the drift shows deleted; the cloud no longer has them, so they are
    ghost candidates (class (c)), never returned.
    """
    by_ref = host_index(h for h in hosts if h.provider in ("", provider))
    out: list[Finding] = []
    for key, record in sorted(index.records.items()):
        if record.gone or record.expected is None or key in index.returning or key in missing:
            continue
        host = by_ref.get(key) or by_ref.get(record.instance_id)
        deadline = index.deadlines.get(key, 0.0) or (host.join_deadline if host else 0.0)
        if host is None or host.state not in NEVER_JOINED_STATES or host.joined_at > 0:
            continue  # joined (or, after a restart, known as joined), or no record to judge by
        if not deadline or now <= deadline:
            continue
        obj = listed.get(record.instance_id)
        out.append(
            Finding(
                CLASS_A,
                provider,
                record.instance_id,
                RETURN,
                instance_key=key,
                op_id=record.op_id,
                name=record.host_name,
                address=obj.address if obj else host.address,
                tags=dict(obj.tags) if obj else {},
                launch_time=obj.launch_time if obj else "",
                evidence={
                    "facts": {
                        "expected_host": True,
                        "join_deadline": deadline,
                        "past_deadline_by": round(now - deadline),
                    },
                    "controller": {"state": host.state, "joined_at": host.joined_at, "host_name": host.host_name},
                    "cloud": {"state": obj.state} if obj else None,
                },
            )
        )
    return out


def tagged_no_fact(
    provider: str,
    cluster: str,
    index: FactIndex,
    hosts: Sequence[HostInfo],
    objects: Sequence[CloudObject],
    action: str,
) -> tuple[list[Finding], list[str]]:
    """Class (b) findings, and the ids of our objects skipped because their op is in flight."""
    live_hosts = [h for h in hosts if h.state in LIVE_HOST_STATES]
    out: list[Finding] = []
    in_flight: list[str] = []
    for obj in objects:
        if not ours(obj, cluster, provider) or obj.state not in LIVE_CLOUD_STATES or obj.id in index.known_ids:
            continue
        if obj.tags.get(KIND) == KIND_BUILDER:
            continue  # a bake's builder: class (e), report only
        op_id = obj.tags.get(owner.OP_ID, "")
        if op_id in index.in_flight:
            in_flight.append(obj.id)  # a create still running or to resume: its facts are coming
            continue
        match = next((h for h in live_hosts if matches(h, obj)), None)
        evidence: dict[str, Any] = {
            "cloud": {"state": obj.state, "listed": True},
            "facts": {"op_known": op_id in {r.op_id for r in index.records.values()}, "instance_fact": False},
            "controller": {"matching_host": match.host_name, "state": match.state} if match else None,
        }
        out.append(
            Finding(
                CLASS_B,
                provider,
                obj.id,
                ADOPT if match else action,
                instance_key=match.instance_key if match else "",
                op_id=op_id,
                name=obj.name,
                address=obj.address,
                tags=dict(obj.tags),
                launch_time=obj.launch_time,
                evidence=evidence,
                adopt_host=match.host_name if match else "",
            )
        )
    return out, in_flight


def matches(host: HostInfo, obj: CloudObject) -> bool:
    """A live host is this object: same instance id, host name or address."""
    return bool(
        (host.instance_id and host.instance_id == obj.id)
        or (host.host_name and host.host_name == obj.name)
        or (host.address and obj.address and host.address == obj.address)
    )


def ghosts(provider: str, index: FactIndex, lost: Sequence[tuple[int, LostInstance]]) -> list[Finding]:
    """Class (c): instances the host-loss rules judge lost whose facts still say they live."""
    out: list[Finding] = []
    for shard, item in lost:
        record = index.records.get(item.instance_key)
        if record is None or record.gone or record.created is None:
            continue  # already retired (the state drops it at the next apply), or not ours to count
        out.append(
            Finding(
                CLASS_C,
                provider,
                item.instance_id,
                RETIRE,
                instance_key=item.instance_key,
                op_id=record.op_id,
                name=record.host_name,
                evidence={"cloud": dict(item.evidence), "facts": {"instance_created": record.created is not None}},
                shard=shard,
                lost=item,
            )
        )
    return out


def bake_leftovers(
    provider: str,
    cluster: str,
    index: FactIndex,
    objects: Sequence[CloudObject],
    images: Sequence[BakedImage],
    kept: frozenset[str],
) -> list[Finding]:
    """Class (e): builders still in the cloud and images no desired set keeps (``kept``: the image
    keys of shard 0's desired set), of ops not in flight; always :data:`REPORT`."""
    out: list[Finding] = []
    for obj in objects:
        if not ours(obj, cluster, provider) or obj.state not in LIVE_CLOUD_STATES:
            continue
        op_id = obj.tags.get(owner.OP_ID, "")
        if obj.tags.get(KIND) != KIND_BUILDER or op_id in index.in_flight:
            continue
        out.append(
            Finding(
                CLASS_E,
                provider,
                obj.id,
                REPORT,
                op_id=op_id,
                name=obj.name,
                address=obj.address,
                tags=dict(obj.tags),
                launch_time=obj.launch_time,
                evidence={"cloud": {"state": obj.state, "kind": KIND_BUILDER}, "facts": {"op_in_flight": False}},
            )
        )
    for image in images:
        if not image.is_bake() or not image.owned_by(cluster, provider) or image.op_id in index.in_flight:
            continue
        if image_key(image.op_id) in kept:
            continue
        out.append(
            Finding(
                CLASS_E,
                provider,
                image.id,
                REPORT,
                op_id=image.op_id,
                name=image.name,
                tags=dict(image.tags),
                launch_time=image.created,
                evidence={"cloud": {"state": image.state, "kind": "image"}, "desired": {"kept": False}},
            )
        )
    return out
