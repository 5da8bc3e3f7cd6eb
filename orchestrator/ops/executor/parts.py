"""What every collaborator of the executor is handed: the configuration, the clients, the hooks.

One :class:`OpParts` per executor, shared by reference: a reload of the daemon (a new
configuration), a test's host control or sleep, or the daemon's stop guard around the recorder
are set once on it and every collaborator sees them at its next step. Whoever builds an
executor builds its parts first and hands them on to whatever else needs them (the daemon's
pass and orphan scan, the provider contract: :class:`~orchestrator.ops.executor.Wired`):
nothing reads them back from the executor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from orchestrator.clients.terraform.engine import Engine
from orchestrator.model.config import Config
from orchestrator.model.offerings import Offering
from orchestrator.model.progress import ProgressSink
from orchestrator.ops.drain import Decommission
from orchestrator.ops.executor.results import Created, CreateResult, ReturnResult
from orchestrator.ops.facts import FactLog
from orchestrator.ops.fence import Fence
from orchestrator.ops.hosts import HostControl
from orchestrator.ops.losses import LossObserver, observer_for
from orchestrator.ops.recorder import OpRecorder, Recorder
from orchestrator.workspace.workdir import ProviderWorkdir

# provider, the instances just created → host name → outcome ("ok", "failed: ...").
Bootstrap = Callable[[str, Sequence[Created]], Mapping[str, str]]
LossFactory = Callable[[Engine, ProviderWorkdir], LossObserver]


class OpWatch(Protocol):
    """Watches every create, warm-pool start and return op from its start to its end (the
    daemon's: held as work in flight, refused once stopping, counted and logged,
    ``orchestrator/daemon/guarded.py``).
    The executor calls it around the op, as it calls its recorder; it never calls the executor."""

    def create(
        self,
        provider: str,
        template: str,
        count: int,
        op_id: str,
        run: Callable[[], CreateResult],
        *,
        pool: bool = False,
    ) -> CreateResult:
        """``run()`` (the create op ``op_id``; ``pool``: into the template's warm pool), watched."""
        ...

    def start_pool(
        self, provider: str, template: str, keys: Sequence[str], op_id: str, run: Callable[[], CreateResult]
    ) -> CreateResult:
        """``run()`` (the warm-pool start op ``op_id`` of ``keys``), watched."""
        ...

    def return_instances(
        self, provider: str, keys: Sequence[str], reason: str, run: Callable[[], ReturnResult]
    ) -> ReturnResult:
        """``run()`` (the return of ``keys``), watched."""
        ...


def op_scope(provider: str, op_id: str) -> str:
    """How an op is named in progress reports: ``<provider> <op id>``."""
    return f"{provider} {op_id}"


def shard_index(shard: ProviderWorkdir) -> int:
    """The shard's index (0 for a plain working directory: it is shard 0)."""
    return int(getattr(shard, "index", 0))


@dataclass(eq=False)
class OpParts:
    """The executor's parts (see the module docstring)."""

    config: Config
    root: Path  # the toolkit root: templates and Terraform roots
    engine: Engine
    fence: Fence
    facts: FactLog
    hosts: HostControl
    bootstrap: Bootstrap | None = None
    decommission: Decommission | None = None
    losses: LossFactory = observer_for
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    # Plans made and instances applied are reported here (the command line shows them).
    progress: ProgressSink | None = None
    # Around every create, warm-pool start and return op (the daemon's in-flight work and op
    # metrics); None: none.
    watch: OpWatch | None = None
    # (template, provider) → the offerings a ``select:`` picked from the provider's catalogue
    # (the daemon's each pass, ``xceprov`` commands read them once): what a create of such a
    # template renders its keys on; None: none (a ``select:`` create is refused in one line).
    selected: Callable[[], Mapping[tuple[str, str], Sequence[Offering]]] | None = None
    # The gate, the facts and the audit entries of every step: a Recorder of these parts unless
    # given (the daemon's stop guard wraps one, ``orchestrator/daemon/guarded.py``).
    recorder: OpRecorder = field(init=False)

    def __post_init__(self) -> None:
        self.recorder = Recorder(self)
