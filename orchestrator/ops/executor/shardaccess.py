"""The executor's parts, the shards of each provider and the runner that works on several shards at once."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.engine import Engine
from orchestrator.errors import LeaseLost
from orchestrator.model.config import Config
from orchestrator.model.facts import Epoch
from orchestrator.model.progress import ProgressSink
from orchestrator.ops.drain import Decommission
from orchestrator.ops.executor.results import Created
from orchestrator.ops.facts import FactLog
from orchestrator.ops.fence import STANDALONE_EPOCH, Fence
from orchestrator.ops.hosts import HostControl
from orchestrator.ops.losses import LossObserver, observer_for
from orchestrator.ops.recorder import OpRecorder, Recorder
from orchestrator.workspace.erroredstate import has_errored_state, recover_errored_state
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.sharedstore import provider_documents
from orchestrator.workspace.terraform import ready_workdir
from orchestrator.workspace.workdir import ProviderWorkdir

# provider, the instances just created → host name → outcome ("ok", "failed: ...").
Bootstrap = Callable[[str, Sequence[Created]], Mapping[str, str]]
LossFactory = Callable[[Engine, ProviderWorkdir], LossObserver]


def op_scope(provider: str, op_id: str) -> str:
    """How an op is named in progress reports: ``<provider> <op id>``."""
    return f"{provider} {op_id}"


def shard_index(shard: ProviderWorkdir) -> int:
    """The shard's index (0 for a plain working directory: it is shard 0)."""
    return int(getattr(shard, "index", 0))


class ShardAccess:
    """The executor's parts and the shards of its providers (the rooms above build on it)."""

    def __init__(
        self,
        config: Config,
        toolkit_root: Path,
        engine: Engine,
        fence: Fence,
        facts: FactLog,
        hosts: HostControl,
        *,
        bootstrap: Bootstrap | None = None,
        decommission: Decommission | None = None,
        losses: LossFactory = observer_for,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        progress: ProgressSink | None = None,
        recorder: OpRecorder | None = None,
    ) -> None:
        self.config = config
        self.root = toolkit_root
        self.engine = engine
        self.fence = fence
        self.facts = facts
        self.hosts = hosts
        self.bootstrap = bootstrap
        self.decommission = decommission
        self.losses = losses
        self.clock = clock
        self.sleep = sleep
        # Plans made and instances applied are reported here (the command line shows them).
        self.progress: ProgressSink | None = progress
        # The gate, the facts and the audit entries of every step (a wrapper of a Recorder where
        # the caller watches the steps: the daemon's stop guard).
        self.recorder: OpRecorder = recorder if recorder is not None else Recorder(config.state_dir, fence, facts)
        self._shards: dict[str, ProviderShards] = {}

    # -- small steps -----------------------------------------------------------------------------

    def shards(self, provider: str) -> ProviderShards:
        """The provider's shards (one object per provider, so its desired-set cache is shared)."""
        if provider not in self._shards:
            documents = provider_documents(self.config, provider, lambda: self.document_epoch(provider))
            self._shards[provider] = ProviderShards(self.config, provider, self.root, documents)
        return self._shards[provider]

    def document_epoch(self, provider: str) -> Epoch | None:
        """The epoch a write of the provider's shared state carries: the fence's, right now.

        A closed fence writes nothing (``LeaseLost``); the shared store refuses an epoch older
        than one it has seen. Standalone (no epoch): None, the standalone lease is the fence.
        """
        epoch = self.fence.gate(provider)
        return None if epoch == STANDALONE_EPOCH else epoch

    def workdir(self, provider: str) -> ProviderWorkdir:
        """The provider's shard 0 (its listing shard), built and initialised."""
        return self.prepared(self.shards(provider).listing_shard())

    def prepared(self, shard: ProviderWorkdir) -> ProviderWorkdir:
        """``shard`` built and initialised (a new shard is made on its first use), with the state
        an earlier apply could not write to its backend written there first."""
        ready_workdir(self.engine, shard)
        self.recover_state(shard)
        return shard

    def recover_state(self, shard: ProviderWorkdir) -> None:
        """The shard's ``errored.tfstate`` pushed to its backend (or found superseded), audited.

        Only under the fence: the push writes the provider's state, which a holder elsewhere may
        be changing; a read-only user (a listing, a dry run) leaves it for the next op.
        """
        if not has_errored_state(shard.path) or not self.fence.valid(shard.provider):
            return
        with shard.lock():
            recovered = recover_errored_state(self.engine, shard.path)
        if recovered is not None:
            self.recorder.audit(
                f"errored-state-{recovered.outcome}",
                provider=shard.provider,
                shard=shard_index(shard),
                **recovered.evidence(),
            )

    def shard_list(self, provider: str) -> list[ProviderWorkdir]:
        """Every shard of the provider on disk, shard 0 first, each built and initialised."""
        self.workdir(provider)
        return [self.prepared(shard) for shard in self.shards(provider).all()]

    def run_shards(
        self, work: Iterable[tuple[ProviderWorkdir, Any]], step: Callable[[ProviderWorkdir, Any], Any]
    ) -> list[Any]:
        """``step(shard, item)`` for every pair, at most ``terraform.parallel_states`` at a time.

        Every shard runs to its end even when another fails (what one shard applied gets its
        facts); then the first failure is raised, a lost lease before any other, so the op stays
        open and resumable. The answers come back in the order of ``work``.
        """
        items = list(work)
        if len(items) <= 1:
            return [step(shard, item) for shard, item in items]
        workers = min(self.config.terraform.parallel_states, len(items))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="xceprov-shard") as pool:
            futures = [pool.submit(step, shard, item) for shard, item in items]
            errors = [f.exception() for f in futures]
        failed = [e for e in errors if e is not None]
        if failed:
            raise next((e for e in failed if isinstance(e, LeaseLost)), failed[0])
        return [f.result() for f in futures]
