"""Resume (:class:`ResumeOp`): every open op is completed or abandoned, explicitly, with an audited reason.

Open ops come from the facts (:mod:`.openops`: an intent without its outcome). For each
instance key still without an outcome:

- create op, key in the Terraform state: the apply happened, the facts did not → commit
  ``instanceCreated`` and ``expectedHost`` (completed);
- create op, key in the desired set but not in the state: the apply did not finish → the
  tagged listing is checked for an object of this op and key (evidence in the audit log), then
  the desired set is applied again; the simulated cloud's ``client_token`` (the instance key)
  makes a second create of the same key return the first instance, never a duplicate;
- create op, key neither desired nor held (the crash came between the intent and the desired
  set): nothing was asked of the cloud → abandoned (``returned`` with the reason in ``detail``),
  but only once the tagged listing confirms it: local files alone are not evidence that the cloud
  holds nothing of the op (another process, a daemon mid-burst, may be about to write them). An
  unreadable listing, or a listing with an object of the op that no shard's state holds, refuses
  the abandonment (:class:`~orchestrator.errors.FinalError` saying why) and the op stays open;
- bake op (an intent whose detail is ``bake: ...``, docs/images.md), key desired or held: the
  builder is applied as intended (no twin: the key is the idempotency token), recorded
  ``instanceCreated`` (never ``expectedHost``, never bootstrapped as a host) and returned; the
  bake is not carried on (the operator bakes again). Key neither desired nor held: as a create;
- start op (warm-pool instances started, docs/operations.md): its keys' desired entries started
  again (the same entries plan no change once applied), applied, expected and bootstrapped
  (:meth:`StartOp.complete`);
- return op: the host-loss path first, as every return's (an instance the cloud took back while
  the op was open, such as a spot reclaim, is recorded ``lost`` and leaves the desired set: the
  plan never re-creates it, and a returning key found so has its outcome); then the key is
  removed from the desired set (when still there), the deletion applied, and ``returned``
  committed. A key no shard holds any more is recorded ``returned`` only when the tagged
  listing no longer shows its instance (the same refusal otherwise).

Keys in the state or the desired set that no fact mentions are reported as untracked, never
changed: the orphan scan decides about them. The tagged listing is the cluster's (modules list
by ``xce:cluster``), so :func:`tagged_objects` keeps only what may be this provider's
(``tags.of_provider``): another provider's instances of the cluster are neither untracked here
nor evidence in this provider's audit entries.

Every shard of the provider is read (docs/architecture.md, "Bursts that scale"): a key is in
exactly one shard's desired set, so resume re-applies only the shards that hold unapplied keys
(the others' plans would be empty) and records facts per shard; the tagged listing comes from
shard 0, the listing shard.

One listing per resume: :func:`survey` keeps what it read (each shard's state and the tagged
listing) as :class:`Seen`, stamped with the lease epoch it was read under, and the first op
resumed after it (``ResumeOp.resume(..., seen=...)``) uses that instead of reading the states and
listing the cloud again (each a Terraform run; the listing a refresh-only plan). Only while the
fence still stamps that same epoch: a listing taken under another lease, or before this one was
gained, or without one (a read beside a daemon), is never used for a decision, the op reads
afresh. The lease is the fence, so under one epoch nothing but this process changes the
provider; the caller hands ``seen`` to one op only, before anything of the provider changed.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from typing import Any

import filelock

from orchestrator.clients.terraform.engine import Engine
from orchestrator.errors import FinalError, LeaseLost, TerraformError
from orchestrator.model import tags as owner
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.images import is_bake_detail
from orchestrator.model.instances import op_of_key
from orchestrator.ops.executor.bake import BakeOp
from orchestrator.ops.executor.create import CreateOp, ShardWork
from orchestrator.ops.executor.parts import OpParts
from orchestrator.ops.executor.returnop import ReturnOp
from orchestrator.ops.executor.shardset import ShardSet
from orchestrator.ops.executor.startop import StartOp
from orchestrator.ops.executor.tfsteps import TerraformSteps
from orchestrator.ops.fence import Fence, epoch_tag
from orchestrator.ops.openops import OpenOp, open_ops
from orchestrator.workspace.workdir import ProviderWorkdir

NO_STATE_YET = "no state yet"


Listing = tuple[str, list[dict[str, Any]]]  # (status, objects) of tagged_objects


@dataclass(frozen=True)
class Seen:
    """What one survey read of a provider under the lease epoch ``epoch``: each shard's state
    instances (by the shard's path) and the tagged listing. Usable while the fence stamps the
    same epoch (:meth:`usable`)."""

    provider: str
    epoch: str
    held: dict[str, dict[str, Any]]
    listing: Listing

    def usable(self, fence: Fence, provider: str) -> bool:
        """Whether ``provider``'s fence still stamps the epoch this was read under."""
        return provider == self.provider and current_epoch(fence, provider) == self.epoch


@dataclass
class ProviderOps:
    """One provider's open ops and what the cloud side holds of them."""

    provider: str
    open: list[OpenOp]
    untracked: list[str] = field(default_factory=list)
    listing: str = "not read"  # "read" | NO_STATE_YET | "not supported by the module" | "unreadable: ..."
    # Shards whose state and desired set were not read: an op was applying on them (their
    # working directory lock was held longer than the reader would wait).
    busy: list[str] = field(default_factory=list)
    # What was read, for the first op resumed next; None without a lease held throughout the read.
    seen: Seen | None = None


@dataclass
class Resolution:
    """What resume did with one open op."""

    provider: str
    op_id: str
    kind: str
    outcome: str  # "completed" | "abandoned"
    reason: str
    keys: list[str] = field(default_factory=list)


def tagged_objects(engine: Engine, workdir: ProviderWorkdir) -> Listing:
    """The cloud's tagged listing of this cluster (``cloudview.read_listing``), when available,
    without the objects tagged for another provider (``tags.of_provider``)."""
    try:
        cloudview = importlib.import_module("orchestrator.workspace.cloudview")
    except ImportError:
        return "unavailable (no cloud view installed)", []
    try:
        listing = cloudview.read_listing(engine, workdir.path, workdir.labels)
    except TerraformError as exc:
        return f"unreadable: {str(exc).splitlines()[0]}", []
    if not listing.supported:
        return "not supported by the module", []
    objects = [
        {"id": o.id, "name": o.name, "state": o.state, "tags": dict(o.tags)}
        for o in listing.objects
        if owner.of_provider(o.tags, workdir.provider)
    ]
    return "read", objects


def current_epoch(fence: Fence, provider: str) -> str | None:
    """The epoch tag the fence would stamp on ``provider`` now; None while it is closed."""
    try:
        return epoch_tag(fence.gate(provider))
    except LeaseLost:
        return None


class ResumeOp:
    """Completes or abandons open ops (see the module docstring): the create, return, bake and
    start ops' own steps (:meth:`CreateOp.complete`, :meth:`ReturnOp.complete_shard`,
    :meth:`BakeOp.finish_interrupted`, :meth:`StartOp.complete`), handed to it as to any
    collaborator."""

    def __init__(
        self,
        parts: OpParts,
        shardset: ShardSet,
        terraform: TerraformSteps,
        creates: CreateOp,
        returns: ReturnOp,
        *,
        bakes: BakeOp,
        starts: StartOp,
    ) -> None:
        self.parts = parts
        self.shardset = shardset
        self.terraform = terraform
        self.creates = creates
        self.returns = returns
        self.bakes = bakes
        self.starts = starts

    def survey(self, provider: str, wait: float | None = None) -> ProviderOps:
        """The provider's open ops plus the keys held or desired that no fact mentions.

        ``wait``: how long to wait for each shard's working directory lock (``None``: as long as
        an op takes). A reader beside a running op (``xceprov ops`` beside the daemon) waits briefly,
        reports the shards it could not read as busy and leaves the tagged listing unread when the
        listing shard is busy (its refresh would wait for the apply's Terraform state lock).
        """
        fence = self.parts.fence
        epoch = current_epoch(fence, provider)  # before any read: all of them are newer than the lease
        facts = self.parts.facts.facts(provider)
        workdir = self.shardset.workdir(provider)
        held: dict[str, Any] = {}
        by_shard: dict[str, dict[str, Any]] = {}
        desired: set[str] = set()
        busy: list[str] = []
        for shard in self.shardset.shard_list(provider):
            try:
                with shard.lock() if wait is None else shard.lock(timeout=wait):
                    by_shard[str(shard.path)] = self.terraform.state_instances(shard)
                    held.update(by_shard[str(shard.path)])
                    desired.update(shard.desired.read())
            except filelock.Timeout:
                busy.append(shard.path.name)
        known_ops = {f.op_id for f in facts if f.kind == FactKind.REQUEST_INTENT}
        untracked = sorted(k for k in set(held) | set(desired) if op_of_key(k) not in known_ops)
        if workdir.path.name in busy:
            return ProviderOps(provider, open_ops(facts), untracked, "not read: an op is applying", busy)
        if held or workdir.desired.exists():
            status, objects = tagged_objects(self.parts.engine, workdir)
        else:
            # Never used here: no desired set and no state, so no cloud view to read (and none failed).
            status, objects = NO_STATE_YET, []
        untracked += sorted(
            f"{o['id']} (cloud, op {o['tags'].get(owner.OP_ID, '?')})"
            for o in objects
            if o["tags"].get(owner.OP_ID) not in known_ops and o["state"] not in ("terminated",)
        )
        seen = None
        if epoch is not None and status == "read" and not busy and current_epoch(fence, provider) == epoch:
            seen = Seen(provider, epoch, by_shard, (status, objects))  # read under one lease throughout
        return ProviderOps(provider, open_ops(facts), untracked, status, busy, seen)

    def resume_all(self, provider: str) -> list[Resolution]:
        """Complete or abandon every open op of ``provider``, oldest first."""
        return [self.resume(op) for op in open_ops(self.parts.facts.facts(provider))]

    def resume(self, op: OpenOp, seen: Seen | None = None) -> Resolution:
        """Complete or abandon one open op (the reconcile loop retries failed ops one by one).

        ``seen``: what a :meth:`survey` just read of the provider, used instead of reading the
        states and the listing again while the fence still stamps its epoch (hand it to one op only).
        """
        if seen is not None and not seen.usable(self.parts.fence, op.provider):
            seen = None
        if (
            op.kind == "create"
            and is_bake_detail(op.detail)
            and self.bakes.finish_interrupted(op.provider, op.op_id, op.template)
        ):
            # An interrupted bake: its builder is recorded and returned, never bootstrapped as a host.
            reason = "bake interrupted: its builder recorded and returned (run xceprov image bake again)"
            self.parts.recorder.audit(
                "resume", provider=op.provider, op=op.op_id, kind="bake", outcome="completed", reason=reason
            )
            return Resolution(op.provider, op.op_id, "create", "completed", reason, list(op.pending))
        if op.kind == "start":
            return self._resume_start(op)
        return self._resume_create(op, seen) if op.kind == "create" else self._resume_return(op, seen)

    def _resume_start(self, op: OpenOp) -> Resolution:
        """A warm-pool start carried to its end: its keys' desired entries started (again: the same
        entries plan no change once applied), applied, expected, bootstrapped (docs/operations.md)."""
        groups = self.returns.group_by_shard(op.provider, op.pending)
        result = self.starts.complete(op.provider, op.op_id, op.template, groups)
        reason = f"{len(result.created)} pool instances started and expected"
        self.parts.recorder.audit(
            "resume", provider=op.provider, op=op.op_id, kind="start", outcome="completed", reason=reason
        )
        return Resolution(op.provider, op.op_id, "start", "completed", reason, list(op.pending))

    def _usable(self, seen: Seen | None, provider: str) -> bool:
        return seen is not None and seen.usable(self.parts.fence, provider)

    def _listing(self, workdir: ProviderWorkdir, seen: Seen | None) -> Listing:
        """The survey's listing when it was read under the current epoch, else a fresh one."""
        if seen is not None and self._usable(seen, workdir.provider):
            return seen.listing
        return tagged_objects(self.parts.engine, workdir)

    def _held(self, shard: ProviderWorkdir, seen: Seen | None) -> dict[str, Any]:
        """The shard's state instances: as the survey read them under the current epoch, or read now."""
        if seen is not None and str(shard.path) in seen.held and self._usable(seen, shard.provider):
            return seen.held[str(shard.path)]
        return self.terraform.state_instances(shard)

    def _resume_create(self, op: OpenOp, seen: Seen | None = None) -> Resolution:
        provider = op.provider
        recorder = self.parts.recorder
        workdir = self.shardset.workdir(provider)
        work: dict[ProviderWorkdir, ShardWork] = {}
        found: set[str] = set()
        for shard in self.shardset.shard_list(provider):
            with shard.lock():
                held = self._held(shard, seen)
                desired = self.terraform.desired(shard)
            unapplied = {k: desired[k] for k in op.pending if k in desired and k not in held}
            mine = [k for k in op.pending if k in desired or k in held]
            found.update(mine)
            if mine:
                work[shard] = (unapplied, mine)
        never = [k for k in op.pending if k not in found]
        unapplied_keys = sorted(k for specs, _keys in work.values() for k in specs)
        if unapplied_keys:
            status, objects = self._listing(workdir, seen)
            tagged = sorted(o["id"] for o in objects if o["tags"].get(owner.OP_ID) == op.op_id)
            recorder.audit(
                "resume-recreate",
                provider=provider,
                op=op.op_id,
                keys=unapplied_keys,
                shards=sorted(str(s.path) for s, (specs, _keys) in work.items() if specs),
                listing=status,
                tagged=tagged,
                reason="desired but not in the state; the key is the cloud's idempotency token",
            )
        if never:
            self._confirm_never_created(op, never, workdir, seen)
            epoch = recorder.gate(provider, op.op_id, "abandon")
            detail = json.dumps({"abandoned": "intent committed, desired set never written: nothing was created"})
            recorder.commit_many(
                [
                    Fact(
                        FactKind.RETURNED,
                        provider,
                        op.op_id,
                        epoch,
                        instance_key=k,
                        template=op.template,
                        detail=detail,
                    )
                    for k in never
                ]
            )
        to_record = sorted(found)
        self.creates.complete(provider, op.op_id, op.template, work)
        if never and not to_record:
            outcome, reason = "abandoned", "the crash came before the desired set: nothing was created"
        else:
            outcome = "completed"
            reason = f"{len(to_record)} instances recorded" + (
                f", {len(never)} never created abandoned" if never else ""
            )
        recorder.audit("resume", provider=provider, op=op.op_id, kind="create", outcome=outcome, reason=reason)
        return Resolution(provider, op.op_id, "create", outcome, reason, list(op.pending))

    def _resume_return(self, op: OpenOp, seen: Seen | None = None) -> Resolution:
        provider = op.provider
        shards = self.shardset.shard_list(provider)
        groups: dict[ProviderWorkdir, list[str]] = {}
        for shard in shards:
            with shard.lock():
                there = set(self.terraform.desired(shard)) | set(self._held(shard, seen))
            mine = [k for k in op.pending if k in there]
            if mine:
                groups[shard] = mine
        # Keys no shard holds any more were deleted before the crash: shard 0 records them returned.
        gone = [k for k in op.pending if not any(k in keys for keys in groups.values())]
        if gone:
            self._confirm_gone(op, gone, shards[0], seen)
            groups.setdefault(shards[0], []).extend(gone)

        def one(shard: ProviderWorkdir, keys: list[str]) -> list[str]:
            with shard.lock():
                # The host-loss path first, as every return's: a returning key found lost has its outcome.
                return self.returns.complete_shard(provider, shard, op.op_id, keys)

        lost = [k for found in self.shardset.run_shards(groups.items(), one) for k in found]
        reason = f"{len(op.pending) - len(lost)} returning instances deleted and recorded returned" + (
            f", {len(lost)} found lost" if lost else ""
        )
        self.parts.recorder.audit(
            "resume", provider=provider, op=op.op_id, kind="return", outcome="completed", reason=reason
        )
        return Resolution(provider, op.op_id, "return", "completed", reason, list(op.pending))

    def _live_listing(
        self, op: OpenOp, keys: list[str], workdir: ProviderWorkdir, seen: Seen | None
    ) -> list[dict[str, Any]]:
        """The tagged listing's objects not terminated; ``FinalError`` when it cannot be read."""
        if seen is not None and self._usable(seen, workdir.provider):
            status, objects = seen.listing
        else:
            with workdir.lock():
                self.terraform.listable(workdir)
            status, objects = tagged_objects(self.parts.engine, workdir)
        if status != "read":
            raise FinalError(
                f"op {op.op_id} on provider {op.provider}: {', '.join(keys)} not recorded returned: no local file "
                f"holds them and the cloud's tagged listing, which must confirm that, is {status}; the op stays "
                "open (run xceprov ops resume again when the listing can be read)"
            )
        return [o for o in objects if o["state"] not in ("terminated",)]

    def _confirm_never_created(self, op: OpenOp, never: list[str], workdir: ProviderWorkdir, seen: Seen | None) -> None:
        """Abandon ``never`` (neither desired nor in any state) only when the cloud lists nothing of
        the op that the states do not hold: else the op is being applied elsewhere, or a state was lost.
        The states are read after the listing, always afresh: an object listed is then in them when
        an apply made it."""
        live = self._live_listing(op, never, workdir, seen)
        held_ids: set[str] = set()
        for shard in self.shardset.shard_list(op.provider):
            with shard.lock():
                held_ids.update(str(v.get("id", "")) for v in self.terraform.state_instances(shard).values())
        stray = sorted(o["id"] for o in live if o["tags"].get(owner.OP_ID) == op.op_id and o["id"] not in held_ids)
        if stray:
            self.parts.recorder.audit("resume-refused", provider=op.provider, op=op.op_id, keys=never, listed=stray)
            raise FinalError(
                f"op {op.op_id} on provider {op.provider}: {', '.join(never)} not abandoned: no local file holds "
                f"them but the cloud lists {', '.join(stray)} of this op (another process may be applying it, such "
                "as a running daemon, or a state was lost: the orphan scan decides); the op stays open"
            )

    def _confirm_gone(self, op: OpenOp, gone: list[str], workdir: ProviderWorkdir, seen: Seen | None) -> None:
        """Record ``gone`` (returning, in no shard) returned only when the listing no longer shows them."""
        live = {o["id"] for o in self._live_listing(op, gone, workdir, seen)}
        ids = {
            f.instance_key: f.instance_id
            for f in self.parts.facts.facts(op.provider)
            if f.kind == FactKind.RETURNING and f.op_id == op.op_id
        }
        still = sorted(f"{k} ({ids.get(k) or k})" for k in gone if (ids.get(k) or k) in live)
        if still:
            self.parts.recorder.audit("resume-refused", provider=op.provider, op=op.op_id, keys=gone, listed=still)
            raise FinalError(
                f"op {op.op_id} on provider {op.provider}: {', '.join(still)} not recorded returned: no local file "
                "holds them but the cloud still lists them; the op stays open (the orphan scan decides)"
            )
