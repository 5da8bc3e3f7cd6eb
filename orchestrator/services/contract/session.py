"""What every action of the contract works with: the configuration, the engine, the records, the
fence, and how a request's worker is started.

The fence is the command line's (``services.ops.fenced_session``): the provider's lease with a
controller, its standalone lock (a local lock file, or the shared store's standalone lease) with
``standalone: true``. The contract's calls and workers join under a label of their own,
``<cluster>-contract-<host>`` (:func:`contract_instance_id`), so a lease holder names them.

Whom a call waits for: with a controller, a provider whose lease another of the contract's own
calls or workers holds (a worker applying a request, a call checking and recording one) is
waited for, up to :data:`FENCE_WAIT` seconds, and then refused (``LeaseHeld``, exit 9, naming
it); a daemon or any other holder (``xceprov apply``, ``ops resume``) is refused at once, naming
it. With ``standalone: true`` the lock does not say whose it is: any holder is waited for up to
:data:`FENCE_WAIT` (a standalone command holds it for its op). Calls of one process (``xceprov
provider serve``) on the same provider queue on a lock of their own first.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import LeaseHeld
from orchestrator.ops.drain import Decommission
from orchestrator.ops.executor import Bootstrap, Wired
from orchestrator.protocol.holder import holder_parts
from orchestrator.services.contract.consumers import GENERIC, Consumer
from orchestrator.services.contract.requests import RequestRecords
from orchestrator.services.ops import fenced_session, read_session, refuse_when_leased
from orchestrator.workspace.terraform import engine_for

# How long a call waits for a fence another of the contract's own holders has (with a
# controller), or any other command (standalone), before it is refused.
FENCE_WAIT = 30.0
FENCE_RETRY = 0.25
# With a controller each try asks the controller's status (and an audit entry records a
# refusal): a calmer pace.
LEASE_RETRY = 1.0
CONTRACT_LABEL = "-contract-"

Spawner = Callable[[str], int]  # request id -> the worker's pid (0: none started)


def contract_instance_id(cluster: str) -> str:
    """The label the contract's sessions join under (informational, part of the holder's name)."""
    return f"{cluster}{CONTRACT_LABEL}{socket.gethostname()}"


def contract_holder(holder: str, cluster: str) -> bool:
    """Whether a lease ``holder`` (``identity/instance``) is one of the contract's calls or workers
    of ``cluster`` (the label the holder joined under, whatever machine it runs on)."""
    return holder_parts(holder)[1].startswith(f"{cluster}{CONTRACT_LABEL}")


@dataclass
class ContractSession:
    """The parts every action shares (one per ``ProviderContract``)."""

    loaded: LoadedConfig
    root: Path
    spawn: Spawner
    bootstrap: bool = True
    engine_given: Engine | None = None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    # Waits are measured on this clock (``clock`` is the wall time facts and windows are on).
    monotonic: Callable[[], float] = time.monotonic
    fence_wait: float = FENCE_WAIT
    # Whose names templates carry (``consumers``): LSF's, a host factory's, or the generic ones.
    consumer: Consumer = GENERIC
    _engine: Engine | None = None
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    @property
    def engine(self) -> Engine:
        """The Terraform engine (made on first use)."""
        with self._guard:
            if self._engine is None:
                self._engine = self.engine_given or engine_for(self.loaded.config)
            return self._engine

    @property
    def records(self) -> RequestRecords:
        """The contract's request records."""
        return RequestRecords(self.loaded.config)

    def _local(self, provider: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(provider, threading.Lock())

    @contextlib.contextmanager
    def fenced(
        self,
        providers: Sequence[str],
        *,
        wait: float | None = None,
        bootstrap: Bootstrap | None = None,
        decommission: Decommission | None = None,
    ) -> Iterator[Wired]:
        """An executor fencing ``providers`` (see the module docstring) until the block ends, with its parts."""
        wanted = sorted(set(providers))
        limit = self.fence_wait if wait is None else wait
        config = self.loaded.config
        label = contract_instance_id(config.cluster)
        with contextlib.ExitStack() as stack:
            for provider in wanted:
                stack.enter_context(self._local(provider))
            deadline = self.monotonic() + limit
            while True:
                try:
                    refuse_when_leased(self.loaded, wanted)
                    ops = stack.enter_context(
                        fenced_session(
                            self.loaded,
                            wanted,
                            self.root,
                            engine=self.engine,
                            bootstrap=bootstrap,
                            decommission=decommission,
                            instance_id=label,
                        )
                    )
                    break
                except LeaseHeld as exc:
                    if not self._waits_for(exc.holder) or self.monotonic() >= deadline:
                        raise
                    self.sleep(FENCE_RETRY if config.standalone else LEASE_RETRY)
            yield ops

    def _waits_for(self, holder: str) -> bool:
        """Whether a call waits for ``holder`` rather than being refused at once (module docstring)."""
        if "-daemon-" in holder:
            return False
        config = self.loaded.config
        return config.standalone or contract_holder(holder, config.cluster)

    @contextlib.contextmanager
    def reading(self) -> Iterator[Wired]:
        """An executor that reads facts, states and listings and changes nothing (no fence), with its parts."""
        with read_session(self.loaded, self.engine, self.root) as ops:
            yield ops
