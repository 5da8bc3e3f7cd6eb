"""What the daemon is built from: the command line's options and the parts of its loop.

:class:`DaemonOptions` holds what only the command line may build (the bootstrap, the
first-boot results' console readers, the engine,
the systemd notifier, the reconciler and scanner factories); :class:`LoopParts` is what the
reconciler and the orphan scan are built from, and the two protocols say what the daemon needs
of the reconciler and its pass report. The process itself is :mod:`.service`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from orchestrator.clients.controller.factreader import FactReader
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.terraform.engine import Engine
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.orphanscan import Scanning
from orchestrator.daemon.systemd import Notifier
from orchestrator.model.config import Config
from orchestrator.model.members import MemberStore
from orchestrator.ops.consoleresults import FirstBootOutcomes
from orchestrator.ops.drain import Decommission
from orchestrator.ops.executor import Bootstrap, Wired
from orchestrator.ops.notices import NoticeRead
from orchestrator.reconcile.report import PassReport
from orchestrator.workspace.pgsite import pg_site


class Reconciling(Protocol):
    """What the daemon needs from the reconciler (``orchestrator.reconcile.loop.Reconciler``)."""

    def run_once(self, trigger: str = "interval") -> PassReport:
        """One pass, in ordered phases."""
        ...

    def reload(self, config: Config) -> None:
        """Use ``config`` from the next pass on."""
        ...


@dataclass(frozen=True)
class LoopParts:
    """What the reconciler is built from (the factory's argument)."""

    config: Config
    # The daemon's executor and the parts it was built from (guarded and watched, guarded.py).
    ops: Wired
    link: ControllerLink
    bootstrap: Bootstrap | None
    clock: Callable[[], float]
    # What holds the pass's resumes beside it as work in flight.
    lifecycle: Lifecycle
    # The facts, read incrementally; shared by the pass and the status file after it.
    facts: FactReader | None = None
    # First-boot hosts' consoles, read by join tracking (ops.firstboot; None: not read).
    first_boot: FirstBootOutcomes | None = None


ReconcilerFactory = Callable[[LoopParts], Reconciling]


def default_reconciler(parts: LoopParts) -> Reconciling:
    """The reconcile loop of ``orchestrator.reconcile.loop`` over the daemon's link."""
    from orchestrator.daemon.guarded import held_unless_stopping
    from orchestrator.daemon.scaleoutlock import scale_out_lock
    from orchestrator.reconcile.loop import Reconciler
    from orchestrator.reconcile.view import LinkView

    lifecycle = parts.lifecycle
    return Reconciler(
        parts.config,
        parts.ops,
        LinkView(parts.link, parts.facts),
        clock=parts.clock,
        state_dir=parts.config.state_dir,
        bootstrap=parts.bootstrap,
        first_boot=parts.first_boot,
        # Daemons sharing a database decide a scale-out one at a time (reconcile/deciding.py).
        scale_out_lock=scale_out_lock(parts.config),
        # A lease gained during a pass is resumed beside it, held as work in flight like the pass:
        # a stop waits for it, and refuses one not started yet (reconcile/beside.py).
        hold=lambda name: held_unless_stopping(lifecycle, name),
    )


ScannerFactory = Callable[[LoopParts], Scanning]


def default_scanner(parts: LoopParts) -> Scanning:
    """The orphan scan of ``orchestrator.orphans`` over the daemon's executor and link."""
    from orchestrator.orphans.inputs import LinkController
    from orchestrator.orphans.scan import OrphanScanner

    return OrphanScanner(parts.config, parts.ops, LinkController(parts.link), parts.clock, parts.config.state_dir)


# The shared store the daemon heartbeats in (None: ``terraform.backend: local``, one daemon asks
# for every provider it is configured for).
MemberStoreFactory = Callable[[Config], MemberStore | None]


def default_member_store(config: Config) -> MemberStore | None:
    """With ``terraform.backend: pg``, the shared store on a connection of the heartbeat's own."""
    from orchestrator.daemon.members import DedicatedStore

    site = pg_site(config)
    return None if site is None else DedicatedStore(site)


@dataclass
class DaemonOptions:
    """What the command line hands the daemon (the parts only it may build)."""

    toolkit_root: Path
    bootstrap: Bootstrap | None = None
    decommission: Decommission | None = None
    # Reads the consoles of first-boot hosts not joined (the command line binds the readers).
    first_boot: FirstBootOutcomes | None = None
    # Interruption notice readers per provider module (the command line binds them; none: no watch).
    notices: Mapping[str, NoticeRead] = field(default_factory=dict)
    engine: Engine | None = None
    notifier: Notifier = field(default_factory=lambda: Notifier({}))
    watchdog_interval: float | None = None
    reconciler: ReconcilerFactory = default_reconciler
    orphan_scanner: ScannerFactory = default_scanner
    member_store: MemberStoreFactory = default_member_store
    clock: Callable[[], float] = time.time
