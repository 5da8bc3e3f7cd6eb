"""The daemon's guard and watch on the executor: no new op once stopping, each op held in flight, outcomes counted.

The reconcile pass calls the executor as the command line does; what the daemon adds is here, so
the pass needs to know nothing about signals:

- every ``create``, ``start_pool`` and ``return_instances`` is held in ``Lifecycle.in_flight`` under its op id
  (:class:`InFlightOps`, the executor's :class:`~orchestrator.ops.executor.OpWatch`):
  a SIGTERM waits for it (up to ``daemon.stop_timeout``) and the log names it; an open op the
  pass resumes takes its first step only while not stopping (:meth:`StopGuard.gate`, the
  daemon's wrapper of the executor's recorder);
- once stopping, a new op is refused before its intent with :class:`NotStarted`, a ``LeaseLost``
  (what the pass already treats as "leave this provider alone, nothing to close");
- each op that ends is counted on ``xceprov_ops_total`` (``parked`` when the fence stopped it),
  its duration observed on ``xceprov_op_duration_seconds``, and logged in one line: what it was,
  how it ended, how long it took, what it did or why it failed (INFO; WARNING unless it succeeded);
- every audit entry the executor writes is proof that the loop is making progress, so it beats
  the watchdog's heartbeat: a long burst is not taken for a stuck loop;
- the decommission play and the drain's waits are refused or cut short the same way
  (:func:`guarded_decommission`, :func:`stoppable_sleep`); a bootstrap play about to start once
  stopping ends the pass instead (:class:`PassAborted`, :func:`guarded_bootstrap`), and one that
  is running ends between two tasks (:func:`play_stop`; its unfinished hosts are bootstrapped
  again at the next start).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from orchestrator.clients.ansible.runner import PlayStop
from orchestrator.clients.controller.types import HostInfo
from orchestrator.daemon.lifecycle import Lifecycle, Stopping, error_line
from orchestrator.daemon.metrics import DaemonMetrics, OpKind, OpOutcome
from orchestrator.daemon.systemd import Heartbeat
from orchestrator.errors import LeaseLost
from orchestrator.model.facts import Epoch, Fact
from orchestrator.ops.drain import Decommission
from orchestrator.ops.executor import Bootstrap, Created, CreateResult, OpParts, OpRecorder, ReturnResult

log = logging.getLogger(__name__)


class NotStarted(LeaseLost):
    """An op, play or wait refused because the daemon is stopping: nothing was changed."""


class PassAborted(BaseException):
    """The daemon is stopping: the rest of the pass is not run (raised where a refusal would be
    taken for a failure of the thing refused).

    A ``BaseException``, like ``KeyboardInterrupt``: the pass catches every ``Exception`` of a
    phase as that phase's failure, and a bootstrap play refused by a stop must not count as a
    failed attempt of every host it would have bootstrapped (attempts lead to returns and to the
    template's breaker). Only the daemon's loop catches it.
    """


class StopGuard:
    """The daemon's stop guard around the executor's recorder (an :class:`OpRecorder`): the
    executor calls it as it calls any recorder, and it never calls the executor back.

    - :meth:`gate`: the recorder's gate; once stopping, only for an op that already took a step;
    - :meth:`action`: an orphan scan's action held in flight; refused once stopping;
    - :meth:`audit`: the recorder's entry, then a heartbeat (the loop is making progress).
    """

    def __init__(self, recorder: OpRecorder, lifecycle: Lifecycle, heartbeat: Heartbeat | None = None) -> None:
        self.recorder = recorder
        self.lifecycle = lifecycle
        self.heartbeat = heartbeat
        # Ops that passed a gate in this pass: once stopping, only they may take another step.
        self._touched: set[str] = set()
        self._touched_lock = threading.Lock()
        # Told of every fact committed through the guard (the flight recorder's op timings).
        self.observer: Callable[[Sequence[Fact]], None] | None = None

    def new_pass(self) -> None:
        """A pass begins: ops of earlier passes that are not running now are not "in flight"."""
        with self._touched_lock:
            self._touched.clear()

    def gate(self, provider: str, op_id: str, step: str) -> Epoch:
        """The recorder's gate; once stopping, only for an op that already took a step.

        A resume of an open op goes through the executor's steps, not through :meth:`create`:
        this is where one the pass is about to start after a SIGTERM is refused, so it stays
        open for the next start instead of starting a Terraform apply the stop would cut.
        """
        with self._touched_lock:
            if op_id not in self._touched:
                if self.lifecycle.stopping:
                    raise NotStarted(
                        f"op {op_id} on provider {provider}: not started ({step}): the daemon is stopping; "
                        "it resumes at the next start"
                    )
                self._touched.add(op_id)
        return self.recorder.gate(provider, op_id, step)

    @contextlib.contextmanager
    def action(self, name: str) -> Iterator[None]:
        """An orphan scan's action held in flight under ``name``; once stopping, :class:`PassAborted`:
        no new action starts, and the rest of the scan is not run (its findings wait for the next
        start's scan; counting each as failed would only hide the stop)."""
        try:
            with held_unless_stopping(self.lifecycle, name), self._fresh(), self.recorder.action(name):
                yield
        except NotStarted as exc:
            raise PassAborted(str(exc)) from None

    @contextlib.contextmanager
    def _fresh(self) -> Iterator[None]:
        # The action's gates are its own: an op id an earlier action touched (the ``orphans``
        # op of report facts) must not let a later one through once stopping.
        with self._touched_lock:
            before = set(self._touched)
        try:
            yield
        finally:
            with self._touched_lock:
                self._touched &= before

    def audit(self, action: str, **details: Any) -> None:
        """The audit entry, then a heartbeat: the loop is making progress."""
        self.recorder.audit(action, **details)
        if self.heartbeat is not None:
            self.heartbeat.beat()

    def commit(self, fact: Fact) -> None:
        """The recorder's commit (its audit entry is the recorder's own, no heartbeat of its own)."""
        self.recorder.commit(fact)
        if self.observer is not None:
            self.observer([fact])

    def commit_many(self, facts: Sequence[Fact]) -> None:
        """The recorder's batch commit."""
        self.recorder.commit_many(facts)
        if self.observer is not None:
            self.observer(facts)


class InFlightOps:
    """The daemon's :class:`~orchestrator.ops.executor.OpWatch`: every create, start and return op held
    as work in flight of ``lifecycle``, refused once stopping, counted and logged (module
    docstring). The executor calls it around each op, as it calls the :class:`StopGuard` around
    each step; neither calls the executor back."""

    def __init__(self, lifecycle: Lifecycle, metrics: DaemonMetrics) -> None:
        self.lifecycle = lifecycle
        self.metrics = metrics

    @contextlib.contextmanager
    def _held(self, name: str, provider: str, kind: OpKind, what: str, fields: dict[str, str]) -> Iterator[list[str]]:
        """The op held in flight under ``name``; counted, timed and logged as ``what`` when it
        ends, with what the body appended to the yielded list (what the op did)."""
        with held_unless_stopping(self.lifecycle, name):
            outcome = OpOutcome.FAILED
            began = time.monotonic()  # a duration, not a date: the wall clock may step
            did: list[str] = []
            try:
                yield did
                outcome = OpOutcome.SUCCEEDED
            except LeaseLost as exc:
                outcome = OpOutcome.PARKED
                did.append(error_line(exc))
                raise
            except Exception as exc:
                did.append(error_line(exc))
                raise
            finally:
                took = time.monotonic() - began
                self.metrics.op_finished(provider, kind, outcome, took)
                level = logging.INFO if outcome is OpOutcome.SUCCEEDED else logging.WARNING
                # ``did`` may quote the cloud's text: an argument, never the format.
                log.log(level, "%s: %s after %.1fs: %s", what, outcome.value, took, "; ".join(did), extra=fields)

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
        """The create op ``op_id`` held in flight under its op id; refused once stopping."""
        into = " into the warm pool" if pool else ""
        what = f"op {op_id} (create of {count} {template} on {provider}{into})"
        fields = {"op_id": op_id, "provider": provider, "template": template}
        with self._held(op_id, provider, OpKind.CREATE, what, fields) as did:
            result = run()
            did.append(f"{len(result.created)} instances created")
            return result

    def start_pool(
        self, provider: str, template: str, keys: Sequence[str], op_id: str, run: Callable[[], CreateResult]
    ) -> CreateResult:
        """The warm-pool start op ``op_id`` held in flight under its op id (kind ``start``); refused once stopping."""
        what = f"op {op_id} (start of {len(keys)} {template} from the warm pool on {provider})"
        fields = {"op_id": op_id, "provider": provider, "template": template}
        with self._held(op_id, provider, OpKind.START, what, fields) as did:
            result = run()
            did.append(f"{len(result.created)} instances started")
            return result

    def return_instances(
        self, provider: str, keys: Sequence[str], reason: str, run: Callable[[], ReturnResult]
    ) -> ReturnResult:
        """The return of ``keys`` held in flight; refused once stopping."""
        name = f"return of {len(set(keys))} instances on {provider}"
        what = f"{name} ({reason})" if reason else name
        with self._held(name, provider, OpKind.RETURN, what, {"provider": provider}) as did:
            result = run()
            done = "would return" if result.dry_run else "returned"
            did.append(f"op {result.op_id} {done} {len(result.deleted or result.keys)}")
            return result


def guard_parts(
    parts: OpParts, lifecycle: Lifecycle, metrics: DaemonMetrics, heartbeat: Heartbeat | None = None
) -> StopGuard:
    """``parts`` made the daemon's: their recorder wrapped in a :class:`StopGuard`, their ops
    watched by :class:`InFlightOps`; the guard (each pass starts it anew, :meth:`StopGuard.new_pass`)."""
    guard = StopGuard(parts.recorder, lifecycle, heartbeat)
    parts.recorder = guard
    parts.watch = InFlightOps(lifecycle, metrics)
    return guard


@contextlib.contextmanager
def held_unless_stopping(lifecycle: Lifecycle, name: str) -> Iterator[None]:
    """Hold ``name`` as work in flight; :class:`NotStarted` (a ``LeaseLost``) once stopping."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(lifecycle.in_flight(name))
        except Stopping as exc:
            raise NotStarted(str(exc)) from None
        yield


def guarded_bootstrap(play: Bootstrap, lifecycle: Lifecycle) -> Bootstrap:
    """``play`` held in flight as ``bootstrap on <provider>``; once stopping, :class:`PassAborted`."""

    def run(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        try:
            with held_unless_stopping(lifecycle, f"bootstrap on {provider}"):
                return play(provider, created)
        except NotStarted as exc:
            raise PassAborted(str(exc)) from None

    return run


def play_stop(lifecycle: Lifecycle) -> PlayStop:
    """How a SIGTERM ends a running bootstrap play: at its next task boundary, or killed once half
    of ``daemon.stop_timeout`` has passed (a long task), which leaves the other half for the rest
    of the stop (records, lease release) and nothing of Ansible running past the bound."""
    bound = lifecycle.config.config.daemon.stop_timeout
    return PlayStop(lifecycle.should_stop, grace=bound / 2, reason="the daemon is stopping")


def guarded_decommission(play: Decommission, lifecycle: Lifecycle) -> Decommission:
    """``play`` held in flight as ``decommission on <provider>``; refused once stopping."""

    def run(provider: str, hosts: Sequence[HostInfo]) -> Mapping[str, str]:
        with held_unless_stopping(lifecycle, f"decommission on {provider}"):
            return play(provider, hosts)

    return run


def stoppable_sleep(lifecycle: Lifecycle) -> Callable[[float], None]:
    """The executor's sleep (a drain's polling): ``NotStarted`` once stopping, so a drain that
    would wait for work to end gives up at once and its hosts stay closed for the next start."""

    def wait(seconds: float) -> None:
        # The wait on the stop flag is the sleep: it ends early on a SIGTERM.
        if lifecycle.wait_stopping(seconds):
            raise NotStarted("the daemon is stopping: not waiting for hosts to drain; they stay closed")

    return wait
