"""The command line's way into the executor: a fenced session, ``xceprov ops`` and ``ops resume``.

:func:`fenced_session` takes the leases of the providers a verb changes and yields an
:class:`~orchestrator.ops.executor.Executor` wired to the controller (facts, hosts) and to the
Terraform engine. The session joins under the instance id ``<cluster>-cli-<hostname>``
(informational) and holds its leases as this process alone (``protocol.holder``): another process
of the same certificate, such as a daemon on the same machine, is another holder. When another
holder has a lease (a running daemon, another command, here or elsewhere), the session refuses
with :class:`~orchestrator.errors.LeaseHeld`, naming the holder, what to do and the controller's
retry-after, and changes nothing; it never releases a lease it was not granted itself. After a
crash (``kill -9``) the crashed command's lease lapses by its TTL before the next one gets it.
``xceprov ops`` (the listing) takes no lease: it reads facts, states and the tagged listing.
With no controller the session is refused unless ``standalone: true``: then a lock per provider
fences the command, the epoch is ``none`` and facts go to a journal (a local lock file and
``<state_dir>/facts/<cluster>.jsonl``; with ``terraform.backend: pg`` a renewed lease row and the
journal of the shared store, shared by standalone commands on every machine); the audit log says so.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.clients.controller.lease import LeaseManager, granted_to
from orchestrator.clients.controller.link import ControllerLink, join_lease_manager
from orchestrator.clients.controller.types import HostInfo, LeaseDenied
from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import ControllerError, LeaseHeld, UsageError
from orchestrator.model.instances import op_of_key
from orchestrator.model.progress import ProgressSink
from orchestrator.model.text import printable
from orchestrator.ops.catalogue import selected_once
from orchestrator.ops.drain import Decommission
from orchestrator.ops.executor import Bootstrap, Created, Executor, OpParts, Resolution, Wired, op_scope
from orchestrator.ops.facts import LinkFacts, standalone_facts
from orchestrator.ops.fence import LeasedFence, ReadOnlyFence, lease_rows, standalone_fence
from orchestrator.ops.firstboot import without_push
from orchestrator.ops.hosts import LinkHosts, NoHosts
from orchestrator.ops.standalone import STANDALONE_GRACE
from orchestrator.services.bootstrap_sources import SimulatedWorld
from orchestrator.workspace.audit import audit
from orchestrator.workspace.terraform import engine_for

if TYPE_CHECKING:  # the runner loads only when a play runs
    from orchestrator.clients.ansible.runner import PlayStop


def cli_instance_id(cluster: str) -> str:
    """The instance id command-line sessions join under (informational; the lease holder is
    the certificate identity and this process's instance, ``protocol.holder``)."""
    return f"{cluster}-cli-{socket.gethostname()}"


def lease_refusal(denied: LeaseDenied) -> LeaseHeld:
    """The one-line refusal of a denied lease: who holds it (or why not), what to do, when to retry."""
    retry = f"{denied.retry_after:.0f}s" if denied.retry_after >= 1 else "a moment"
    if denied.holder:
        holder = printable(denied.holder)
        if "-daemon-" in holder:  # the label of daemon_instance_id: say what to do about a daemon
            todo = "let the daemon do the work, or stop it for the time of this command"
        else:
            todo = "wait for that command to end"
        why = f"is held by {holder} ({todo})"
    elif denied.reason == "grace":
        why = "is in the controller's grace period after a failover"
    else:
        why = f"is not available ({denied.reason or 'denied'})"
    return LeaseHeld(
        f"provider {denied.provider}: the lease {why}; retry in {retry}", denied.holder, denied.retry_after
    )


def refuse_when_leased(loaded: LoadedConfig, providers: Sequence[str]) -> None:
    """Refuse at once (``LeaseHeld``, exit 9) when another holder has a live lease of one of
    ``providers``, before a verb reads anything under the working directory locks: a daemon's
    burst holds them for as long as it applies, and the verb would wait only to be refused.

    A look at the controller's status, no lease taken; the fence itself is still the lease
    that :func:`fenced_session` acquires afterwards. Standalone with ``terraform.backend: pg``:
    a look at the providers' standalone lease rows and the daemons of the cluster
    (``ops/standalone.py``); standalone with local locks: nothing to check.
    """
    config = loaded.config
    if config.standalone:
        fence = standalone_fence(config, providers)
        if isinstance(fence, LeasedFence):
            fence.check()
        return
    with ControllerLink(config.controller, instance_id=cli_instance_id(config.cluster), cluster=config.cluster) as link:
        try:
            link.open()
            leases = link.query_status().leases
        except ControllerError as exc:
            raise _unreachable(exc, loaded) from None
    for lease in leases:
        if lease.provider in providers and lease.holder and lease.expires_in > 0:
            denied = LeaseDenied(lease.provider, lease.holder, lease.expires_in, "held")
            audit(config.state_dir, "lease-refused", provider=lease.provider, holder=lease.holder, reason="held")
            raise lease_refusal(denied)


def _unreachable(exc: ControllerError, loaded: LoadedConfig) -> ControllerError:
    """No controller: nothing was changed, and how to change a cloud without one."""
    return ControllerError(
        f"{exc}; no change was made (to change the cloud with no controller at all, "
        f"set standalone: true in {loaded.source})",
        delay=exc.delay,
    )


def _shared_grant(state_dir: Path, provider: str, holder: str) -> LeaseHeld:
    """A grant to the certificate identity, not to this process: the controller does not tell
    processes of one identity apart, so a daemon or command beside this one may hold the lease.
    Nothing is changed and the lease is not released (it may be the other's): it lapses by its TTL."""
    audit(
        state_dir, "lease-refused", provider=provider, holder=holder, reason="granted to the identity, not the process"
    )
    return LeaseHeld(
        f"provider {provider}: the controller granted the lease to {printable(holder)}, not to this process "
        "alone (it does not tell processes of one certificate apart, docs/protocol.md section 5): a daemon or "
        "command with the same certificate may hold it; nothing was changed",
        holder,
    )


@contextlib.contextmanager
def _leased(
    loaded: LoadedConfig, providers: Sequence[str], instance_id: str
) -> Iterator[tuple[LeaseManager, ControllerLink]]:
    config = loaded.config
    link = ControllerLink(config.controller, instance_id=instance_id, providers=providers, cluster=config.cluster)
    try:
        try:
            link.open()
        except ControllerError as exc:
            raise _unreachable(exc, loaded) from None
        for provider in providers:
            answer = link.acquire(provider)
            if not isinstance(answer, LeaseDenied) and not granted_to(answer.holder, link.lease_instance):
                raise _shared_grant(config.state_dir, provider, answer.holder)
            if isinstance(answer, LeaseDenied):
                audit(
                    config.state_dir,
                    "lease-refused",
                    provider=provider,
                    holder=answer.holder,
                    retry_after=answer.retry_after,
                    reason=answer.reason,
                )
                raise lease_refusal(answer)
        manager = LeaseManager(
            link,
            providers,
            margin=float(config.controller.lease_margin),
            holder_id=instance_id,
            instance=link.lease_instance,
        )
        join_lease_manager(link, manager)
        manager.step()  # acquire now (the same holder: the grant just made), then renew in the background
        manager.start()
        try:
            yield manager, link
        finally:
            manager.close(release=True)
    finally:
        link.close()


@contextlib.contextmanager
def fenced_session(
    loaded: LoadedConfig,
    providers: Sequence[str],
    toolkit_root: Path,
    *,
    engine: Engine | None = None,
    bootstrap: Bootstrap | None = None,
    decommission: Decommission | None = None,
    progress: ProgressSink | None = None,
    instance_id: str | None = None,
) -> Iterator[Wired]:
    """An executor holding the leases of ``providers`` (or their standalone locks) until the block
    ends, with the parts it was built from (its fact log, recorder, engine...).

    ``progress`` gets the executor's plans and applies as they happen (see ``model.progress``).
    ``instance_id``: the informational label the session joins under (default
    :func:`cli_instance_id`); it is part of the lease holder's name a refusal shows.
    """
    config = loaded.config
    engine = engine or engine_for(config)
    wanted = sorted(set(providers))
    if config.standalone:
        audit(
            config.state_dir,
            "standalone",
            providers=wanted,
            reason=(
                "standalone: true in the configuration: "
                f"{'lease in the shared store' if config.terraform.backend == 'pg' else 'local lock'}, "
                "epoch none, no controller"
            ),
        )
        with standalone_fence(config, wanted) as fence:
            facts = standalone_facts(config)
            yield Wired.of(
                OpParts(
                    config,
                    toolkit_root,
                    engine,
                    fence,
                    facts,
                    NoHosts(),
                    bootstrap=bootstrap,
                    decommission=decommission,
                    progress=progress,
                    selected=selected_once(config),
                )
            )
        return
    with _leased(loaded, wanted, instance_id or cli_instance_id(config.cluster)) as (manager, link):
        yield Wired.of(
            OpParts(
                config,
                toolkit_root,
                engine,
                manager,
                LinkFacts(link),
                LinkHosts(link),
                bootstrap=bootstrap,
                decommission=decommission,
                progress=progress,
                selected=selected_once(config),
            )
        )


def playbook_callables(
    loaded: LoadedConfig,
    toolkit_root: Path,
    world: SimulatedWorld | None = None,
    progress: ProgressSink | None = None,
    stop: PlayStop | None = None,
) -> tuple[Bootstrap, Decommission]:
    """The bootstrap and decommission plays of ``services/bootstrap.py`` as the executor's callables
    (``world``: the simulated world's parts, which only the command line may hand over; ``progress``:
    where the plays report their hosts and tasks; ``stop``: what ends a running bootstrap play
    between tasks, its unfinished hosts then ``stopped: ...``)."""
    from orchestrator.services.bootstrap import Playbook
    from orchestrator.services.bootstrap import bootstrap as run_play

    def _outcome(
        names: list[str], playbook: Playbook, scope: str, deadlines: Mapping[str, float] | None = None
    ) -> Mapping[str, str]:
        # A decommission is never stopped halfway: the return it belongs to waits for it.
        ends = stop if playbook == "bootstrap" else None
        result = run_play(
            loaded,
            toolkit_root,
            hosts=names,
            playbook=playbook,
            world=world,
            progress=progress,
            scope=scope,
            stop=ends,
            join_deadlines=deadlines,
        )
        return {name: h.status + (f": {h.message}" if h.message else "") for name, h in result.hosts.items()}

    def boot(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        # First-boot hosts join by themselves: started at creation, no play (ops/firstboot.py).
        push, started = without_push(loaded.config, created)
        if not push:
            return started
        scope = op_scope(provider, op_of_key(push[0].key))
        # Each host's token expires at its join deadline (the expectedHost fact's).
        deadlines = {c.key: c.join_deadline for c in push}
        return {**_outcome([c.name for c in push], "bootstrap", scope, deadlines), **started}

    def decom(provider: str, hosts: Sequence[HostInfo]) -> Mapping[str, str]:
        return _outcome([h.host_name for h in hosts if h.host_name], "decommission", provider)

    return boot, decom


@dataclass(frozen=True)
class OpsReport:
    """What ``xceprov ops`` shows: per provider, open ops and untracked keys."""

    providers: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {"providers": self.providers}


# How long ``xceprov ops`` waits for a shard's working directory lock before it reports the shard
# busy: an op applying there (a daemon's burst) may hold it for minutes.
LISTING_WAIT = 2.0


@contextlib.contextmanager
def read_session(loaded: LoadedConfig, engine: Engine, toolkit_root: Path) -> Iterator[Wired]:
    """An executor that can read facts, states and listings and change nothing (no lease), with its parts."""
    config = loaded.config
    if config.standalone:
        facts = standalone_facts(config)
        yield Wired.of(OpParts(config, toolkit_root, engine, ReadOnlyFence(), facts, NoHosts()))
        return
    providers = sorted(config.providers)
    link = ControllerLink(
        config.controller, instance_id=cli_instance_id(config.cluster), providers=providers, cluster=config.cluster
    )
    try:
        link.open()
        yield Wired.of(OpParts(config, toolkit_root, engine, ReadOnlyFence(), LinkFacts(link), LinkHosts(link)))
    finally:
        link.close()


def list_ops(loaded: LoadedConfig, toolkit_root: Path, engine: Engine | None = None) -> OpsReport:
    """Open ops of every provider, read without a lease (so beside a running daemon too): facts
    from the controller, each shard's state and desired set under its lock, the tagged listing.
    A shard whose lock an applying op holds is reported busy instead of waited for."""
    config = loaded.config
    providers = sorted(config.providers)
    out: list[dict[str, Any]] = []
    with read_session(loaded, engine or engine_for(config), toolkit_root) as ops:
        for provider in providers:
            found = ops.executor.survey(provider, wait=LISTING_WAIT)
            out.append(
                {
                    "provider": provider,
                    "open": [asdict(o) for o in found.open],
                    "untracked": found.untracked,
                    "listing": found.listing,
                    "busy": found.busy,
                }
            )
    return OpsReport(out)


def hand_over(loaded: LoadedConfig, providers: Sequence[str]) -> list[tuple[str, str | None]]:
    """Hand ``providers`` from the controller to standalone commands (``xceprov ops hand-over``):
    the controller epoch each one's shared state was last written under no longer refuses them
    (``clients/postgres/standalone.py``). For a cluster whose controller is gone for good; refused
    (``LeaseHeld``, nothing changed) while a daemon's member row holds the provider. Audited.
    Returns each provider with the epoch handed over (None: there was none)."""
    config = loaded.config
    rows = lease_rows(config) if config.standalone else None
    if rows is None:
        raise UsageError(
            f"{loaded.source}: ops hand-over needs standalone: true and terraform.backend: pg "
            "(it hands a provider of the shared store from the controller to standalone commands)"
        )
    unknown = sorted(set(providers) - set(config.providers))
    if unknown:
        raise UsageError(f"ops hand-over: provider {unknown[0]!r} is not in {loaded.source}")
    done: list[tuple[str, str | None]] = []
    try:
        for provider in sorted(set(providers)):
            epoch = rows.hand_over(provider, STANDALONE_GRACE)
            audit(config.state_dir, "standalone-hand-over", provider=provider, epoch=epoch or "none")
            done.append((provider, epoch))
    finally:
        rows.close()
    return done


def resume_ops(
    loaded: LoadedConfig, toolkit_root: Path, engine: Engine | None = None, executor: Executor | None = None
) -> list[Resolution]:
    """Complete or abandon every open op of every provider (audited)."""
    providers = sorted(loaded.config.providers)
    if executor is not None:
        return [r for p in providers for r in executor.resume(p)]
    refuse_when_leased(loaded, providers)
    with fenced_session(loaded, providers, toolkit_root, engine=engine) as session:
        return [r for p in providers for r in session.executor.resume(p)]
