"""The command line's way into the executor: a fenced session, ``xceprov ops`` and ``ops resume``.

:func:`fenced_session` takes the leases of the providers a verb changes and yields an
:class:`~orchestrator.ops.executor.Executor` wired to the controller (facts, hosts) and to the
Terraform engine. The session joins under a stable instance id per cluster and machine
(``<cluster>-cli-<hostname>``): after a crash (``kill -9``) the next command is the previous
holder and is re-granted at once, so ``xceprov ops resume`` need not wait for the TTL. When
another instance (a running daemon, a command on another machine) holds a lease, the session
refuses with :class:`~orchestrator.errors.LeaseHeld`, naming the holder and the controller's
retry-after. With no controller the session is refused unless ``standalone: true``: then a
local lock per provider fences the command, the epoch is ``none`` and facts go to a local
journal (``<state_dir>/facts/<cluster>.jsonl``); the audit log says so.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.clients.controller.lease import LeaseManager
from orchestrator.clients.controller.link import ControllerLink, join_lease_manager
from orchestrator.clients.controller.types import HostInfo, LeaseDenied
from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import ControllerError, LeaseHeld
from orchestrator.model.instances import op_of_key
from orchestrator.model.progress import ProgressSink
from orchestrator.ops.drain import Decommission
from orchestrator.ops.executor import Bootstrap, Created, Executor, op_scope
from orchestrator.ops.facts import LinkFacts, LocalFacts
from orchestrator.ops.fence import StandaloneFence
from orchestrator.ops.hosts import LinkHosts, NoHosts
from orchestrator.ops.resume import Resolution, resume_provider, survey
from orchestrator.services.bootstrap_sources import SimulatedWorld
from orchestrator.workspace.audit import audit
from orchestrator.workspace.terraform import engine_for


def cli_instance_id(cluster: str) -> str:
    """The instance id command-line sessions hold leases under (stable per cluster and machine)."""
    return f"{cluster}-cli-{socket.gethostname()}"


def lease_refusal(denied: LeaseDenied) -> LeaseHeld:
    """The one-line refusal of a denied lease: who holds it (or why not) and when to retry."""
    retry = f"{denied.retry_after:.0f}s" if denied.retry_after >= 1 else "a moment"
    if denied.holder:
        why = f"is held by {denied.holder}"
    elif denied.reason == "grace":
        why = "is in the controller's grace period after a failover"
    else:
        why = f"is not available ({denied.reason or 'denied'})"
    return LeaseHeld(
        f"provider {denied.provider}: the lease {why}; retry in {retry}", denied.holder, denied.retry_after
    )


@contextlib.contextmanager
def _leased(loaded: LoadedConfig, providers: Sequence[str]) -> Iterator[tuple[LeaseManager, ControllerLink]]:
    config = loaded.config
    instance_id = cli_instance_id(config.cluster)
    link = ControllerLink(config.controller, instance_id=instance_id, providers=providers, cluster=config.cluster)
    try:
        try:
            link.open()
        except ControllerError as exc:
            raise ControllerError(
                f"{exc}; no change was made (to change the cloud with no controller at all, "
                f"set standalone: true in {loaded.source})",
                delay=exc.delay,
            ) from None
        for provider in providers:
            answer = link.acquire(provider)
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
        manager = LeaseManager(link, providers, margin=float(config.controller.lease_margin), holder_id=instance_id)
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
) -> Iterator[Executor]:
    """An executor holding the leases of ``providers`` (or their standalone locks) until the block ends.

    ``progress`` gets the executor's plans and applies as they happen (see ``model.progress``).
    """
    config = loaded.config
    engine = engine or engine_for(config)
    wanted = sorted(set(providers))
    if config.standalone:
        audit(
            config.state_dir,
            "standalone",
            providers=wanted,
            reason="standalone: true in the configuration: local lock, epoch none, no controller",
        )
        with StandaloneFence(config.state_dir / "locks", wanted) as fence:
            facts = LocalFacts(config.state_dir / "facts" / f"{config.cluster}.jsonl")
            yield Executor(
                config,
                toolkit_root,
                engine,
                fence,
                facts,
                NoHosts(),
                bootstrap=bootstrap,
                decommission=decommission,
                progress=progress,
            )
        return
    with _leased(loaded, wanted) as (manager, link):
        yield Executor(
            config,
            toolkit_root,
            engine,
            manager,
            LinkFacts(link),
            LinkHosts(link),
            bootstrap=bootstrap,
            decommission=decommission,
            progress=progress,
        )


def playbook_callables(
    loaded: LoadedConfig,
    toolkit_root: Path,
    world: SimulatedWorld | None = None,
    progress: ProgressSink | None = None,
) -> tuple[Bootstrap, Decommission]:
    """The bootstrap and decommission plays of ``services/bootstrap.py`` as the executor's callables
    (``world``: the simulated world's parts, which only the command line may hand over; ``progress``:
    where the plays report their hosts and tasks)."""
    from orchestrator.services.bootstrap import Playbook
    from orchestrator.services.bootstrap import bootstrap as run_play

    def _outcome(names: list[str], playbook: Playbook, scope: str) -> Mapping[str, str]:
        result = run_play(
            loaded, toolkit_root, hosts=names, playbook=playbook, world=world, progress=progress, scope=scope
        )
        return {name: h.status + (f": {h.message}" if h.message else "") for name, h in result.hosts.items()}

    def boot(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        scope = op_scope(provider, op_of_key(created[0].key)) if created else provider
        return _outcome([c.name for c in created], "bootstrap", scope)

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


def list_ops(loaded: LoadedConfig, toolkit_root: Path, engine: Engine | None = None) -> OpsReport:
    """Open ops of every provider (needs the leases: the listing reads the state under the lock)."""
    config = loaded.config
    providers = sorted(config.providers)
    out: list[dict[str, Any]] = []
    with fenced_session(loaded, providers, toolkit_root, engine=engine) as executor:
        for provider in providers:
            found = survey(executor, provider)
            out.append(
                {
                    "provider": provider,
                    "open": [asdict(o) for o in found.open],
                    "untracked": found.untracked,
                    "listing": found.listing,
                }
            )
    return OpsReport(out)


def resume_ops(
    loaded: LoadedConfig, toolkit_root: Path, engine: Engine | None = None, executor: Executor | None = None
) -> list[Resolution]:
    """Complete or abandon every open op of every provider (audited)."""
    providers = sorted(loaded.config.providers)
    if executor is not None:
        return [r for p in providers for r in resume_provider(executor, p)]
    with fenced_session(loaded, providers, toolkit_root, engine=engine) as session:
        return [r for p in providers for r in resume_provider(session, p)]
