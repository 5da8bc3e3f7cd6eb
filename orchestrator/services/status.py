"""``xceprov status``: the controller link, leases, demand against supply, and open ops.

One-shot: connects (every configured address in turn, following redirects), joins as a
provisioner under a status-only instance id (it acquires nothing, so it never disturbs the
running orchestrator's leases), asks for the controller's status and the facts of every
configured provider, and disconnects. Leases are shown by the controller's clock: the holder's
own view ends ``margin`` earlier.

Open ops are derived from facts: a ``requestIntent`` with fewer instances accounted for
(``instanceCreated``, or ``lost``/``returned`` before a creation was recorded) than its count,
and a ``returning`` without its ``returned`` or ``lost``; a warm-pool start while one of its
keys has no ``expectedHost``. The warm pools (docs/daemon.md, "The warm pool") come from the
facts too: per template and provider, the target (``warm_pool``), the instances waiting stopped
and those of a fill still on their way. The instances per offering (each template's on each
provider, as the budgets count them) and their cost per hour at the offering's price come from
the facts as well (``orchestrator.reconcile.offered``).

Who holds which provider: with ``terraform.backend: pg`` from the live members of the shared
store (each daemon heartbeats what it holds, docs/daemon.md); otherwise, or when the store does not
answer, from the controller's leases (the holder's process instance and its label).

The daemon's own view comes from its status file (``<state_dir>/daemon/status.json``, written
after every pass and when a bootstrap batch starts): whether it runs and how old its last word
is, its leases with their remaining validity (or who holds a lease it does not), the bootstrap's
share of its created hosts per provider (waiting, running, done, failed), its first-boot hosts
by outcome with those not joined and the recent failed first boots, and the reclaim
candidates of its last pass, and the memory of refusals as it last read it (what the cloud
refused, held until when). The
circuit breakers are read from their durable file (``<state_dir>/breakers.json``), so they show
with or without a daemon.

This module gathers the report; ``orchestrator.services.status_text`` renders it as text.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import ControllerStatus, Fact, LinkState
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import ConfigError, ControllerError, XceprovError
from orchestrator.model.config import Config
from orchestrator.model.members import DEFAULT_LEASE_TTL, MemberStore, holders, live_window
from orchestrator.ops.openops import open_ops as find_open_ops
from orchestrator.protocol.holder import holder_parts
from orchestrator.reconcile.breaker import Breakers
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.offered import offering_usage
from orchestrator.reconcile.pool import pools
from orchestrator.reconcile.reasons import reasons_from_json, reasons_json
from orchestrator.workspace.daemonstatus import read_status
from orchestrator.workspace.pgsite import pg_site
from orchestrator.workspace.sharedstore import cluster_documents


@dataclass(frozen=True)
class LeaseRow:
    """One provider's lease by the controller's clock."""

    provider: str
    holder: str
    epoch: str
    expires_in: float
    grace_ends_in: float


@dataclass(frozen=True)
class HolderRow:
    """Which process instance holds one provider's lease, with its label and the epoch."""

    provider: str
    instance: str
    label: str
    epoch: str


@dataclass(frozen=True)
class DemandRow:
    """Demand against supply of one template."""

    template: str
    wanted: int
    pending_hosts: int
    in_flight: int
    joined: int
    idle: int
    busy: int


@dataclass(frozen=True)
class OpenOp:
    """An op whose intent is committed but whose outcome is not (yet)."""

    provider: str
    op_id: str
    action: str  # "create" or "return"
    template: str
    wanted: int
    done: int
    epoch: str
    since: float  # unix seconds of the intent fact


@dataclass(frozen=True)
class PoolRow:
    """The warm pool of one template on one provider."""

    provider: str
    template: str
    target: int  # warm_pool
    stopped: int  # made and waiting stopped
    pending: int  # of a fill op still on its way (no instanceCreated yet)
    instances: tuple[str, ...]  # host names of those waiting, oldest first


@dataclass(frozen=True)
class OfferingRow:
    """The instances of one template on one provider's offering, and their cost per hour."""

    provider: str
    template: str
    offering: str  # "" for instances of a select: template placed before offerings were named
    instances: int
    cost_per_hour: float


@dataclass(frozen=True)
class DaemonView:
    """What the daemon's status file says, and whether a daemon is running now."""

    running: bool
    stale: bool
    age: float  # seconds since the daemon wrote it
    path: str
    state: str = ""  # running | stopping | stopped
    pid: int = 0
    instance_id: str = ""
    host: str = ""
    passes: int = 0
    last_pass: dict[str, Any] | None = None
    leases: tuple[dict[str, Any], ...] = ()
    reclaim_candidates: tuple[dict[str, Any], ...] = ()
    orphans: dict[str, Any] | None = None  # the orphan scans' timer and last scan (docs/daemon.md)
    store: dict[str, Any] | None = None  # with a shared store: its reachability and this daemon's share
    # Per provider, created hosts by bootstrap state: waiting, running, done, failed (statusdoc.py).
    bootstrap: dict[str, dict[str, int]] | None = None
    # First-boot hosts: counts by outcome per provider, those not joined, the recent failures
    # (statusdoc.first_boot_share); None when the file has none.
    first_boot: dict[str, Any] | None = None
    # Per template, why the last pass launched what it did or nothing (reconcile/reasons.py).
    reasons: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    # The memory of refusals as the daemon last read it: {scope, provider, placement, failures,
    # first, last, until, text} each (docs/daemon.md, "The memory of refusals").
    refusals: tuple[dict[str, Any], ...] = ()
    # Hosts acted on for an interruption notice (docs/daemon.md, "Spot interruption notices").
    notices: tuple[dict[str, Any], ...] = ()


def daemon_view(state_dir: Path) -> DaemonView | None:
    """The daemon's last status (None when no daemon ever ran with this state directory)."""
    found = read_status(state_dir)
    if found is None:
        return None
    doc, info = found.document, found.daemon
    return DaemonView(
        running=found.running,
        stale=found.stale,
        age=found.age,
        path=str(found.path),
        state=str(info.get("state", "")),
        pid=int(info.get("pid", 0)),
        instance_id=str(info.get("instance_id", "")),
        host=str(info.get("host", "")),
        passes=int(info.get("passes", 0)),
        last_pass=doc.get("last_pass"),
        leases=tuple(doc.get("leases", [])),
        reclaim_candidates=tuple(doc.get("reclaim_candidates", [])),
        orphans=doc.get("orphans") if isinstance(doc.get("orphans"), dict) else None,
        store=doc.get("store") if isinstance(doc.get("store"), dict) else None,
        bootstrap=bootstrap_counts(doc.get("bootstrap")),
        first_boot=doc.get("first_boot") if isinstance(doc.get("first_boot"), dict) else None,
        reasons=reasons_json(reasons_from_json(doc.get("reasons"))),
        refusals=tuple(r for r in doc.get("refusals") or [] if isinstance(r, dict)),
        notices=tuple(n for n in doc.get("notices") or () if isinstance(n, dict)),
    )


def bootstrap_counts(member: Any) -> dict[str, dict[str, int]] | None:
    """The status file's ``bootstrap`` member as numbers (None when the file has none, as one
    written before it existed)."""
    if not isinstance(member, dict):
        return None
    out: dict[str, dict[str, int]] = {}
    for provider, counts in sorted(member.items()):
        if isinstance(counts, dict):
            out[str(provider)] = {str(k): int(v) for k, v in counts.items() if isinstance(v, int)}
    return out


def breaker_rows(loaded: LoadedConfig, now: float | None = None) -> tuple[dict[str, Any], ...]:
    """Every recorded breaker's evidence (position now, failures, reopens at, why)."""
    config = loaded.config
    breakers = Breakers.load(config.state_dir, config.policy.breaker, cluster_documents(config))
    when = time.time() if now is None else now
    return tuple(state.evidence(when, breakers.settings) for state in breakers.states())


@dataclass(frozen=True)
class StatusReport:
    """Everything ``xceprov status`` shows."""

    link: LinkState
    controller_id: str
    term: int
    primary: str
    leases: tuple[LeaseRow, ...]
    demand: tuple[DemandRow, ...]
    demand_seq: int
    open_ops: tuple[OpenOp, ...]
    hosts: int
    pending_work: int
    running_work: int
    term_started: float = 0.0  # unix seconds the controller's current term started (0: not reported)
    daemon: DaemonView | None = None  # None: no daemon ever wrote a status with this state_dir
    breakers: tuple[dict[str, Any], ...] = ()
    # Local state that could not be read (the daemon's state dir is 0700: another user's
    # `xceprov status` still shows the controller's view, and says what it could not see).
    unreadable: dict[str, str] = field(default_factory=dict)  # "daemon" | "breakers" -> why
    # Who holds each provider, and from where: "store" (the shared store's live members) or
    # "controller" (its leases: no shared store, or one that did not answer, see ``store``).
    holders: tuple[HolderRow, ...] = ()
    holders_from: str = "controller"
    store: dict[str, Any] | None = None  # with a shared store: {"reachable", "error", "members"}
    pools: tuple[PoolRow, ...] = ()
    offerings: tuple[OfferingRow, ...] = ()
    # What the cloud refused and until when (from the daemon's status file; empty without one).
    refusals: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON values (``xceprov status --json``); ``reasons``: the daemon's
        last pass's, per template (docs/daemon.md, "Why nothing launched")."""
        return {**asdict(self), "reasons": self.daemon.reasons if self.daemon is not None else {}}


def pool_rows(config: Config, facts: dict[str, list[Fact]]) -> tuple[PoolRow, ...]:
    """Every warm pool with a target or a member, from the facts (``orchestrator.reconcile.pool``)."""
    records = [r for provider_facts in facts.values() for r in ledger(provider_facts).values()]
    rows = []
    for (provider, template), members in pools(config, records).items():
        made = [r for r in members if r.created is not None]
        on = config.templates.get(template)
        side = on.providers.get(provider) if on is not None else None
        target = side.warm_pool if side is not None else 0
        names = tuple(r.host_name or r.key for r in made)
        rows.append(PoolRow(provider, template, target, len(made), len(members) - len(made), names))
    return tuple(rows)


def offering_rows(config: Config, facts: dict[str, list[Fact]]) -> tuple[OfferingRow, ...]:
    """This cluster's instances per template, provider and offering, with their cost per hour
    (``orchestrator.reconcile.offered``: as the budgets count them, at the offering's price)."""
    return tuple(
        OfferingRow(provider, template, offering, int(used["instances"]), used["cost_per_hour"])
        for provider, templates in offering_usage(config, facts).items()
        for template, offerings in sorted(templates.items())
        for offering, used in sorted(offerings.items())
    )


def open_ops(facts: list[Fact]) -> list[OpenOp]:
    """Ops of one provider that have an intent without its outcome (``orchestrator.ops.openops``)."""
    return [
        OpenOp(o.provider, o.op_id, o.kind, o.template, o.count, o.done, o.epoch, o.since) for o in find_open_ops(facts)
    ]


def status_instance_id(cluster: str) -> str:
    """The instance id ``xceprov status`` joins under (never a lease holder)."""
    return f"{cluster}-status-{socket.gethostname()}-{os.getpid()}"


# The shared store ``xceprov status`` reads the members from (None: ``terraform.backend: local``).
MemberSource = Callable[[Config], MemberStore | None]


def open_member_store(config: Config) -> MemberStore | None:
    """The shared store of ``terraform.backend: pg`` on a connection of its own (None with
    ``local``); ``ConfigError`` when its connection string is missing, ``StoreUnavailable`` when
    it does not answer."""
    site = pg_site(config)
    return None if site is None else site.open_store()


def store_holders(
    config: Config, source: MemberSource, live_within: float
) -> tuple[dict[str, Any] | None, tuple[HolderRow, ...] | None]:
    """The shared store's view (None without one) and the holders by its live members (None
    when it did not answer: the controller's view stands in)."""
    store: MemberStore | None = None
    try:
        store = source(config)
        if store is None:
            return None, None
        members = list(store.members(live_within))
    except ConfigError:
        raise  # no connection string: the configuration is wrong, not the store
    except Exception as exc:  # any failure to read the store is shown, never a traceback
        return {"reachable": False, "error": (str(exc).splitlines() or [type(exc).__name__])[0], "members": []}, None
    finally:
        if store is not None:
            store.close()
    held = holders(members)
    rows = tuple(HolderRow(p, h.instance, h.label, h.epoch) for p, h in sorted(held.items()))
    view = {
        "reachable": True,
        "error": "",
        "members": [
            {"instance": m.instance, "label": m.label, "held": dict(sorted(m.held.items())), "age": round(m.age_s, 3)}
            for m in sorted(members, key=lambda m: m.instance)
        ],
    }
    return view, rows


def lease_holders(leases: tuple[LeaseRow, ...]) -> tuple[HolderRow, ...]:
    """The holders as the controller names them (``identity/instance``)."""
    return tuple(HolderRow(x.provider, *holder_parts(x.holder), x.epoch) for x in leases if x.holder)


def collect_status(loaded: LoadedConfig, member_source: MemberSource | None = None) -> StatusReport:
    """Connect once and gather the report; ``ControllerError`` (one line, naming the addresses
    tried) when no controller answers."""
    config = loaded.config
    providers = sorted(config.providers)
    instance_id = status_instance_id(config.cluster)
    link = ControllerLink(config.controller, instance_id=instance_id, cluster=config.cluster)
    try:
        link.open()
        status: ControllerStatus = link.query_status()
        facts = {p: link.query_facts(p) for p in providers}
        state = link.state()
    finally:
        link.close()
    if not state.address:
        raise ControllerError("controller link closed before the status was read")
    leases = tuple(
        LeaseRow(x.provider, x.holder, x.epoch.tag(), x.expires_in, x.grace_ends_in)
        for x in sorted(status.leases, key=lambda x: x.provider)
    )
    demand = tuple(
        DemandRow(t.template, t.wanted, t.pending_hosts, t.in_flight, t.joined, t.idle, t.busy)
        for t in sorted(status.demand.templates, key=lambda t: t.template)
    )
    ops = tuple(op for p in providers for op in open_ops(facts[p]))
    # Members are live within the deal's window (two thirds of the controller's lease TTL, named
    # at join): status names the holders the daemons themselves deal by.
    live_within = live_window(state.lease_ttl or DEFAULT_LEASE_TTL)
    store, by_members = store_holders(config, member_source or open_member_store, live_within)
    return StatusReport(
        link=state,
        controller_id=status.controller_id,
        term=status.term,
        primary=status.primary or state.primary,
        leases=leases,
        demand=demand,
        demand_seq=status.demand.seq,
        open_ops=ops,
        hosts=len(status.hosts),
        pending_work=status.pending_work,
        running_work=status.running_work,
        term_started=status.term_started,
        holders=by_members if by_members is not None else lease_holders(leases),
        holders_from="store" if by_members is not None else "controller",
        store=store,
        pools=pool_rows(config, facts),
        offerings=offering_rows(config, facts),
        **local_state(loaded),
    )


def local_state(loaded: LoadedConfig) -> dict[str, Any]:
    """The daemon's status and the breakers, each read on its own: one that cannot be read is
    named in ``unreadable`` and the report goes on."""
    unreadable: dict[str, str] = {}
    out: dict[str, Any] = {"unreadable": unreadable}
    readers: dict[str, Callable[[], Any]] = {
        "daemon": lambda: daemon_view(loaded.config.state_dir),
        "breakers": lambda: breaker_rows(loaded),
    }
    for key, read in readers.items():
        try:
            out[key] = read()
        except (XceprovError, OSError) as exc:
            unreadable[key] = (str(exc).splitlines() or [type(exc).__name__])[0]
    daemon = out.get("daemon")
    out["refusals"] = daemon.refusals if isinstance(daemon, DaemonView) else ()
    return out


def offline_state(loaded: LoadedConfig) -> dict[str, Any]:
    """What ``xceprov status`` still knows with no controller: the local state and, with a shared
    store, who holds what by its live members (``store``; ``holders``, empty when it did not answer)."""
    store, rows = store_holders(loaded.config, open_member_store, DEFAULT_LEASE_TTL)
    return {**local_state(loaded), "store": store, "holders": rows or ()}


def offline_json(error: str, local: dict[str, Any]) -> dict[str, Any]:
    """``status --json`` when no controller answered: ``controller`` says why, the local state follows."""
    daemon = local.get("daemon")
    return {
        "controller": {"reachable": False, "error": error},
        "daemon": asdict(daemon) if daemon is not None else None,
        "breakers": list(local.get("breakers", ())),
        "refusals": list(local.get("refusals", ())),
        "unreadable": local["unreadable"],
        "store": local.get("store"),
        "holders": [asdict(row) for row in local.get("holders", ())],
        "reasons": daemon.reasons if daemon is not None else {},
    }
