"""The shard set: the shards of each provider, built and initialised, and the runner that works on several at once."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from orchestrator.errors import LeaseLost
from orchestrator.model.facts import Epoch
from orchestrator.ops.executor.parts import OpParts, shard_index
from orchestrator.ops.fence import STANDALONE_EPOCH
from orchestrator.workspace.erroredstate import has_errored_state, recover_errored_state
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.sharedstore import provider_documents
from orchestrator.workspace.terraform import ready_workdir
from orchestrator.workspace.workdir import ProviderWorkdir


class ShardSet:
    """The shards of the executor's providers (docs/architecture.md, "Bursts that scale")."""

    def __init__(self, parts: OpParts) -> None:
        self.parts = parts
        self._shards: dict[str, ProviderShards] = {}

    def shards(self, provider: str) -> ProviderShards:
        """The provider's shards (one object per provider, so its desired-set cache is shared)."""
        if provider not in self._shards:
            documents = provider_documents(self.parts.config, provider, lambda: self.document_epoch(provider))
            self._shards[provider] = ProviderShards(self.parts.config, provider, self.parts.root, documents)
        return self._shards[provider]

    def document_epoch(self, provider: str) -> Epoch | None:
        """The epoch a write of the provider's shared state carries: the fence's, right now.

        A closed fence writes nothing (``LeaseLost``); the shared store refuses an epoch older
        than one it has seen. Standalone (no epoch): None, the standalone lease is the fence.
        """
        epoch = self.parts.fence.gate(provider)
        return None if epoch == STANDALONE_EPOCH else epoch

    def workdir(self, provider: str) -> ProviderWorkdir:
        """The provider's shard 0 (its listing shard), built and initialised."""
        return self.prepared(self.shards(provider).listing_shard())

    def prepared(self, shard: ProviderWorkdir) -> ProviderWorkdir:
        """``shard`` built and initialised (a new shard is made on its first use), with the state
        an earlier apply could not write to its backend written there first."""
        ready_workdir(self.parts.engine, shard)
        self.recover_state(shard)
        return shard

    def recover_state(self, shard: ProviderWorkdir) -> None:
        """The shard's ``errored.tfstate`` pushed to its backend (or found superseded), audited.

        Only under the fence: the push writes the provider's state, which a holder elsewhere may
        be changing; a read-only user (a listing, a dry run) leaves it for the next op.
        """
        if not has_errored_state(shard.path) or not self.parts.fence.valid(shard.provider):
            return
        with shard.lock():
            recovered = recover_errored_state(self.parts.engine, shard.path)
        if recovered is not None:
            self.parts.recorder.audit(
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
        workers = min(self.parts.config.terraform.parallel_states, len(items))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="xceprov-shard") as pool:
            futures = [pool.submit(step, shard, item) for shard, item in items]
            errors = [f.exception() for f in futures]
        failed = [e for e in errors if e is not None]
        if failed:
            raise next((e for e in failed if isinstance(e, LeaseLost)), failed[0])
        return [f.result() for f in futures]
