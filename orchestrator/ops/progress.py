"""One apply's Terraform events as progress: an instance is done when all its planned changes are.

Every module keeps its instances in one resource keyed by instance key (``this["<key>"]``), but a
module may change more than one resource per key; so the tracker counts, per key, the changes the
checked plan holds, and reports the instance when the last of them completed. A failed change
reports the instance as failed with Terraform's diagnostic for that address (which comes after the
failure), or, when none names it, at :meth:`ApplyTracker.finish`.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping

from orchestrator.clients.terraform.messages import ApplyEvent, ApplyHook, PlanResult
from orchestrator.model.progress import InstanceAction, InstanceDone, ProgressSink
from orchestrator.ops.plancheck import address_key, change_key


class ApplyTracker:
    """Folds one apply's :data:`ApplyEvent` values into ``InstanceDone`` events for ``sink``."""

    def __init__(self, sink: ProgressSink, scope: str, plan: PlanResult, names: Mapping[str, str]) -> None:
        changes = [c for c in plan.changes if c.action not in ("no-op", "read")]
        self._pending: Counter[str] = Counter(change_key(c) for c in changes)
        self._actions: dict[str, InstanceAction] = {
            change_key(c): "delete" if c.action == "delete" else "create" for c in changes
        }
        self._sink = sink
        self._scope = scope
        self._names = names
        self._errored: set[str] = set()
        self._reported: set[str] = set()
        self._lock = threading.Lock()

    @property
    def total(self) -> int:
        """How many instances the apply changes."""
        return len(self._pending)

    def __call__(self, event: ApplyEvent) -> None:
        """One Terraform event (from the engine's reader thread)."""
        with self._lock:
            if isinstance(event, ApplyHook):
                key = change_key(event.change)
                if key not in self._pending or key in self._reported:
                    return
                if event.stage == "complete":
                    self._pending[key] -= 1
                    if self._pending[key] <= 0:
                        self._report(key, ok=True)
                elif event.stage == "errored":
                    self._errored.add(key)
            elif event.severity == "error" and event.address:
                key = address_key(event.address)
                if key in self._errored and key not in self._reported:
                    detail = event.detail.strip().splitlines()[0] if event.detail.strip() else ""
                    self._report(key, ok=False, reason=f"{event.summary}: {detail}" if detail else event.summary)

    def finish(self) -> None:
        """Report the failed instances no diagnostic named (after the apply returned or raised)."""
        with self._lock:
            for key in sorted(self._errored - self._reported):
                self._report(key, ok=False, reason="the apply failed (see the error)")

    def _report(self, key: str, *, ok: bool, reason: str = "") -> None:
        self._reported.add(key)
        name = self._names.get(key, "")
        self._sink(InstanceDone(self._scope, key, name, self._actions[key], ok, reason[:200]))
