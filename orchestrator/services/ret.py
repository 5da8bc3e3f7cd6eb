"""``xceprov return HOST...``: drain hosts and give them back, through the executor.

Hosts are named by host name or instance key; only instances in this cluster's desired sets
can be named. Each provider's hosts are one return op: joined hosts are closed at the controller
(no new work), the op waits until none runs work or the drain timeout passes (``--drain-timeout``,
else the provider's ``drain_timeout``), then follows ``drain_policy`` (``wait``: stop and leave the
hosts closed, ``return``: return anyway). ``--now`` closes and returns without waiting.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.progress import ProgressSink
from orchestrator.ops.drain import DrainSettings
from orchestrator.ops.executor import Executor, OpParts, ReturnResult, Wired
from orchestrator.ops.facts import NoFacts
from orchestrator.ops.fence import ReadOnlyFence
from orchestrator.ops.hosts import NoHosts
from orchestrator.services.bootstrap_sources import SimulatedWorld
from orchestrator.services.ops import fenced_session, playbook_callables, refuse_when_leased
from orchestrator.workspace.terraform import engine_for


def resolve_hosts(config: Config, executor: Executor, names: Sequence[str]) -> dict[str, list[str]]:
    """Provider → instance keys of the named hosts (host names or keys); unknown names refused."""
    found: dict[str, list[str]] = {}
    seen: set[str] = set()
    for provider in sorted(config.providers):
        desired = executor.desired(provider)  # every shard of the provider
        for key, spec in desired.items():
            for ref in (key, spec.name):
                if ref in names:
                    found.setdefault(provider, []).append(key)
                    seen.add(ref)
    unknown = [n for n in names if n not in seen]
    if unknown:
        raise UsageError(f"{', '.join(unknown)}: no such host in this cluster's desired sets")
    return {p: sorted(set(keys)) for p, keys in found.items()}


def return_hosts(
    loaded: LoadedConfig,
    toolkit_root: Path,
    names: Sequence[str],
    *,
    drain_timeout: float | None = None,
    now: bool = False,
    engine: Engine | None = None,
    wired: Wired | None = None,
    world: SimulatedWorld | None = None,
    progress: ProgressSink | None = None,
) -> list[ReturnResult]:
    """Drain and return the named hosts; one return op per provider.

    ``progress`` gets the plans, the destroyed instances and the decommissioned hosts.
    """
    if not names:
        raise UsageError("name the hosts to return (host names or instance keys)")
    config = loaded.config
    engine = engine or (wired.parts.engine if wired is not None else engine_for(config))
    if wired is None:
        refuse_when_leased(loaded, sorted(config.providers))
    reader = Executor(OpParts(config, toolkit_root, engine, ReadOnlyFence(), NoFacts(), NoHosts()))
    chosen = resolve_hosts(config, reader, names)
    drain = DrainSettings(drain=True, timeout=0.0 if now else drain_timeout, policy="return" if now else None)
    reason = "xceprov return" + (" --now" if now else "")
    if wired is not None:
        return [wired.executor.return_instances(p, keys, drain=drain, reason=reason) for p, keys in chosen.items()]
    decommission = playbook_callables(loaded, toolkit_root, world, progress)[1]
    with fenced_session(
        loaded, sorted(chosen), toolkit_root, engine=engine, decommission=decommission, progress=progress
    ) as session:
        return [session.executor.return_instances(p, keys, drain=drain, reason=reason) for p, keys in chosen.items()]
