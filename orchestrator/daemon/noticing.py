"""The part of :class:`.service.Daemon` that runs the notice watch (``noticewatch.py``) and, between
two passes, the host-loss path of noticed hosts whose reclaim came.

The watch runs on a thread of its own from the start (its reads and the controller's close do
not wait for a pass); the loss of a reclaimed host is recorded on the loop's thread, like an
orphan scan (the executor and its working directories are the pass's), held as work in flight.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from orchestrator.clients.controller.factreader import FactReader
from orchestrator.clients.controller.hostnotice import HostNotices
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.daemon.guarded import NotStarted, PassAborted, StopGuard, held_unless_stopping
from orchestrator.daemon.lifecycle import Lifecycle
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.daemon.noticewatch import NoticeMetrics, NoticeWatch
from orchestrator.daemon.parts import DaemonOptions
from orchestrator.errors import LeaseLost, XceprovError
from orchestrator.model.config import Config
from orchestrator.model.facts import Epoch
from orchestrator.model.instances import new_op_id
from orchestrator.ops.executor import Wired
from orchestrator.ops.notices import NoticeReader
from orchestrator.reconcile.noticebook import NoticeBook
from orchestrator.workspace.sharedstore import cluster_documents

log = logging.getLogger(__name__)


class NoticeHandling:
    """Starts the watch and retires reclaimed hosts; :class:`.service.Daemon` sets the parts it reads."""

    config: Config
    lifecycle: Lifecycle
    options: DaemonOptions
    metrics: DaemonMetrics
    link: ControllerLink | None
    fact_reader: FactReader | None
    ops: Wired | None
    guard: StopGuard | None
    providers: list[str]
    notice_watch: NoticeWatch | None
    wake: Callable[[str], None]

    def start_notice_watch(self) -> None:
        """The watch on its own thread, when some module's notices are read here."""
        assert self.link is not None and self.fact_reader is not None and self.ops is not None
        if not self.options.notices:
            return
        fence, facts = self.ops.parts.fence, self.fact_reader

        def leases() -> dict[str, Epoch]:
            held: dict[str, Epoch] = {}
            for provider in self.providers:
                try:
                    held[provider] = fence.gate(provider)
                except (LeaseLost, XceprovError):
                    continue
            return held

        watch = NoticeWatch(
            reader=NoticeReader(lambda: self.config, self.options.notices, self.options.clock),
            link=HostNotices(self.link),
            book=NoticeBook(cluster_documents(self.config)),
            leases=leases,
            facts=facts.facts,
            wake=self.wake,
            state_dir=str(self.config.state_dir),
            interval=lambda: float(self.config.daemon.notice_interval),
            metrics=NoticeMetrics(self.metrics.registry),
            clock=self.options.clock,
        )
        stop = threading.Event()
        self.lifecycle.on_stop("notice watch", stop.set)
        threading.Thread(target=watch.run, args=(stop,), name="notice-watch", daemon=True).start()
        self.notice_watch = watch

    def retire_reclaimed(self) -> bool:
        """The host-loss path on noticed hosts whose reclaim came (between two passes); False
        once stopping."""
        watch, ops = self.notice_watch, self.ops
        if watch is None or ops is None or self.lifecycle.stopping:
            return not self.lifecycle.stopping
        for provider, keys in watch.take_due_losses().items():
            try:
                with held_unless_stopping(self.lifecycle, f"loss check of noticed hosts ({provider})"):
                    if self.guard is not None:
                        self.guard.new_pass()
                    lost = ops.executor.observe_losses(provider, keys, new_op_id())
            except (NotStarted, PassAborted):
                return False
            except Exception as exc:  # tried again at the next read of the notices
                log.warning("loss check of noticed hosts of %s failed: %s", provider, _line(exc))
                continue
            if lost:
                log.info("noticed hosts of %s reclaimed by the cloud, loss recorded: %s", provider, ", ".join(lost))
            watch.settled(provider, keys)
        return not self.lifecycle.stopping

    def notices_json(self) -> list[dict[str, Any]]:
        """The status file's ``notices`` (empty without a watch)."""
        return self.notice_watch.to_json() if self.notice_watch is not None else []


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
