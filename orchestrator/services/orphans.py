"""``xceprov orphans``: the orphan scan for the command line (report), and the administrator's confirmations.

* :func:`scan_orphans` reports only (``act=False``): it needs no lease, so it runs beside a
  daemon that holds them. It joins the controller under its own instance id
  (``<cluster>-orphans-<hostname>``) to read status, hosts and facts, and reads the cloud views
  through an executor whose fence is closed (:class:`~orchestrator.ops.fence.ReadOnlyFence`):
  nothing can change. With no controller reachable the report says the controller's view is
  unread and the classes it needs unscanned (the report is incomplete: ``xceprov orphans`` exits
  11); in standalone mode the local fact journal is read instead.
* :func:`confirm_orphan` is ``xceprov orphans adopt|return ID``: a fenced session holding the
  provider leases (like every verb that changes the cloud), a fresh scan, and the one finding
  acted on through the same guards as the daemon's scan (docs/orphans-json.md), every guard
  that refuses it named; ``--confirm`` waives the time guards (audited), ``--dry-run`` reads
  as the report does (no lease, nothing changed).
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import ControllerStatus, HostInfo
from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import ControllerError
from orchestrator.model.facts import Fact
from orchestrator.ops.executor import OpParts, Wired
from orchestrator.ops.facts import LinkFacts, NoFacts, standalone_facts
from orchestrator.ops.fence import ReadOnlyFence
from orchestrator.ops.hosts import LinkHosts, NoHosts
from orchestrator.orphans.classes import Finding
from orchestrator.orphans.confirm import Confirmation
from orchestrator.orphans.inputs import LinkController, ScanController
from orchestrator.orphans.report import ScanReport
from orchestrator.orphans.scan import OrphanScanner, providers_of
from orchestrator.services.bootstrap_sources import SimulatedWorld
from orchestrator.services.ops import fenced_session, playbook_callables
from orchestrator.workspace.terraform import engine_for


def reader_instance_id(cluster: str) -> str:
    """The instance id the report-only scan joins the controller under (it asks for no lease)."""
    return f"{cluster}-orphans-{socket.gethostname()}"


@contextlib.contextmanager
def _reader(loaded: LoadedConfig, engine: Engine, toolkit_root: Path) -> Iterator[tuple[Wired, ScanController | None]]:
    config = loaded.config
    if config.standalone:
        facts = standalone_facts(config)
        yield Wired.of(OpParts(config, toolkit_root, engine, ReadOnlyFence(), facts, NoHosts())), None
        return
    providers = sorted(config.providers)
    link = ControllerLink(
        config.controller, instance_id=reader_instance_id(config.cluster), providers=providers, cluster=config.cluster
    )
    try:
        try:
            link.open()
        except ControllerError as exc:
            # Unreachable: still report what the cloud shows; the scan says the controller is unread.
            reader = Wired.of(OpParts(config, toolkit_root, engine, ReadOnlyFence(), NoFacts(), NoHosts()))
            yield reader, _Unreachable(str(exc).splitlines()[0] if str(exc) else "unreachable")
            return
        yield (
            Wired.of(OpParts(config, toolkit_root, engine, ReadOnlyFence(), LinkFacts(link), LinkHosts(link))),
            (LinkController(link)),
        )
    finally:
        link.close()


class _Unreachable:
    """The controller could not be reached when the command started (every read fails with why)."""

    def __init__(self, error: str) -> None:
        self.error = error

    def connected(self) -> bool:
        """True: asking costs nothing and every read fails at once with the reason it was unreachable."""
        return True

    def status(self) -> ControllerStatus:
        """Refused: unreachable."""
        raise ControllerError(self.error)

    def hosts(self) -> Sequence[HostInfo]:
        """Refused: unreachable."""
        raise ControllerError(self.error)

    def facts(self, provider: str) -> list[Fact]:
        """Refused: unreachable."""
        raise ControllerError(self.error)


def scan_orphans(
    loaded: LoadedConfig, toolkit_root: Path, provider: str | None = None, engine: Engine | None = None
) -> ScanReport:
    """One report-only scan (``xceprov orphans``): detections audited, nothing changed."""
    config = loaded.config
    providers_of(config, provider)  # an unknown provider is refused before anything is opened
    with _reader(loaded, engine or engine_for(config), toolkit_root) as (executor, controller):
        return OrphanScanner(config, executor, controller, time.time, config.state_dir).scan(
            act=False, provider=provider
        )


def confirm_orphan(
    loaded: LoadedConfig,
    toolkit_root: Path,
    ref: str,
    action: str,
    *,
    provider: str | None = None,
    engine: Engine | None = None,
    world: SimulatedWorld | None = None,
    dry_run: bool = False,
    waive_time: bool = False,
) -> Finding:
    """``xceprov orphans adopt|return REF [--dry-run] [--confirm]``: through the scan's guards.

    Under the leases; a dry run takes none (it reads as ``xceprov orphans`` does, beside a daemon
    that holds them, and says whether another holder has the lease the real run needs).
    """
    config = loaded.config
    providers = providers_of(config, provider)
    confirmation = Confirmation(ref, action, dry_run=dry_run, waive_time=waive_time)
    if dry_run:
        with _reader(loaded, engine or engine_for(config), toolkit_root) as (reader, controller):
            return OrphanScanner(config, reader, controller, time.time, config.state_dir).confirm(
                confirmation, provider=provider
            )
    decommission = playbook_callables(loaded, toolkit_root, world)[1]
    with fenced_session(loaded, providers, toolkit_root, engine=engine, decommission=decommission) as ops:
        facts = ops.parts.facts
        controller = LinkController(facts.link) if isinstance(facts, LinkFacts) else None
        scanner = OrphanScanner(config, ops, controller, time.time, config.state_dir)
        return scanner.confirm(confirmation, provider=provider)
