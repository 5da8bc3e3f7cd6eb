"""What every action of the contract works with: the configuration, the engine, the records, the
fence, and how a request's worker is started.

The fence is the command line's (``services.ops.fenced_session``): the provider's lease with a
controller, its standalone lock (a local lock file, or the shared store's advisory lock) with
``standalone: true``. Another holder with a live lease is refused at once (``LeaseHeld``, exit 9,
naming it); a standalone lock held by another command is waited for up to :data:`FENCE_WAIT`
seconds (a contract call holds it for a moment: two one-shot calls at once are serialised), and
then refused the same way (a worker applying a request holds it for the apply). Calls of one
process (``xceprov provider serve``) on the same provider queue on a lock of their own first.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import LeaseHeld
from orchestrator.ops.drain import Decommission
from orchestrator.ops.executor import Bootstrap, Executor
from orchestrator.services.contract.requests import RequestRecords
from orchestrator.services.ops import fenced_session, read_session, refuse_when_leased
from orchestrator.workspace.terraform import engine_for

# How long a call waits for a standalone lock another command holds before it is refused.
FENCE_WAIT = 30.0
FENCE_RETRY = 0.25

Spawner = Callable[[str], int]  # request id -> the worker's pid (0: none started)


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
    ) -> Iterator[Executor]:
        """An executor fencing ``providers`` (see the module docstring) until the block ends."""
        wanted = sorted(set(providers))
        limit = self.fence_wait if wait is None else wait
        with contextlib.ExitStack() as stack:
            for provider in wanted:
                stack.enter_context(self._local(provider))
            refuse_when_leased(self.loaded, wanted)
            deadline = self.monotonic() + limit
            while True:
                try:
                    executor = stack.enter_context(
                        fenced_session(
                            self.loaded,
                            wanted,
                            self.root,
                            engine=self.engine,
                            bootstrap=bootstrap,
                            decommission=decommission,
                        )
                    )
                    break
                except LeaseHeld as exc:
                    if "-daemon-" in exc.holder or self.monotonic() >= deadline:
                        raise
                    self.sleep(FENCE_RETRY)
            yield executor

    @contextlib.contextmanager
    def reading(self) -> Iterator[Executor]:
        """An executor that reads facts, states and listings and changes nothing (no fence)."""
        with read_session(self.loaded, self.engine, self.root) as executor:
            yield executor
