"""Leases gained while a pass runs (a takeover): each provider resumed at once, on a thread of its own.

A pass reads which leases are valid once, at its start. A provider whose lease comes during the
pass (the provider of a dead daemon, granted when its lease lapsed at the controller) has open
ops its previous holder left: waiting for the unit of work in flight on this daemon (a create,
a bootstrap call of minutes) would add that unit's time to the takeover. So while the pass runs,
:class:`BesideResumes` watches the providers that were not leased at the read and, as soon as
one's lease is valid, resumes it on a thread of its own, beside the pass.

The rules that keep one actor per provider:

* the pass never acts on such a provider while its resume runs: it is not in the pass's leased
  set (``PassContext.leased``), which only the pass's own thread changes, and it joins that set
  only when the pass takes the finished resume (:meth:`BesideResumes.collect`, between two
  phases); a resume that ended with the lease lost, or that raised, is not joined (the next pass,
  leased from its read, resumes the provider in full);
* one resume per provider and pass, and none outlives its pass (:meth:`BesideResumes.finish`
  waits for every one before the pass returns its report), so two never overlap;
* each resume is held as work in flight (``hold``: the daemon's ``held_unless_stopping``): a stop
  waits for it as it waits for the pass, a stop asked for before it started refuses it (its ops
  stay open for the next holder), and the executor's fence and gate still guard every write in it, as
  they do the pass's (the daemon's stop closes the fence, an apply in flight parks).

Every outcome comes back as a ``resume`` :class:`~orchestrator.reconcile.report.PhaseOutcome`: an
exception that escaped the resume (even one past the phase's own isolation) is reported as a
failed resume, never lost with its thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Generic, TypeVar

from orchestrator.errors import LeaseLost

log = logging.getLogger(__name__)

# How often the watcher looks at the leases of the providers the pass did not hold at its read.
# Each look reads the lease keeper's shared record (no network), so it can be frequent: a
# takeover waits at most this long beyond the grant.
GAIN_POLL = 0.05

# Holds ``name`` as work in flight for the block (a stop waits for it); raises ``LeaseLost``
# (the daemon's ``NotStarted``) when it must not start.
Hold = Callable[[str], AbstractContextManager[None]]


def no_hold(_name: str) -> AbstractContextManager[None]:
    """Outside the daemon nothing is held: the pass itself is the unit of work."""
    return contextlib.nullcontext()


# The loop's phase outcome (``PhaseOutcome``; generic here so that this module needs nothing of the loop).
Outcome = TypeVar("Outcome")


@dataclass(frozen=True)
class Resumed(Generic[Outcome]):
    """What one resume beside the pass gave back: its ``resume`` phase outcome, and whether the
    provider may join the pass's leased set (its lease held throughout, the phase ran to its end)."""

    provider: str
    outcome: Outcome
    joined: bool


class BesideResumes(Generic[Outcome]):
    """Watches ``watched`` while a pass runs; resumes each one whose lease becomes valid."""

    def __init__(
        self,
        watched: Sequence[str],
        valid: Callable[[str], bool],
        resume: Callable[[str], tuple[Outcome, bool]],
        failed: Callable[[str, str, str], Outcome],
        *,
        hold: Hold = no_hold,
        poll: float = GAIN_POLL,
        limit: int = 2,
    ) -> None:
        self._watched = list(watched)
        self._valid = valid
        self._resume = resume
        self._failed = failed
        self._hold = hold
        self._poll = poll
        # At most ``limit`` resumes at once (``terraform.parallel_states``): when a peer holding
        # ten providers dies, its ten resumes would otherwise start ten Terraform runs together
        # on this machine's cores, beside the pass's own. The others wait their turn, held.
        self._slots = threading.BoundedSemaphore(limit)
        self._stop = threading.Event()
        # What the watcher and the resume threads share with the pass's thread: started (one
        # resume per provider and pass), the threads, the finished resumes not yet collected.
        self._lock = threading.Lock()
        self._started: set[str] = set()
        self._threads: list[threading.Thread] = []
        self._done: list[Resumed[Outcome]] = []
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        """Start watching (nothing to do when every provider was leased at the read)."""
        if not self._watched:
            return
        self._watcher = threading.Thread(target=self._watch, name="xceprov-gain-watch", daemon=True)
        self._watcher.start()

    def collect(self) -> list[Resumed[Outcome]]:
        """The resumes that ended since the last look, in the order they ended (taken once)."""
        with self._lock:
            done, self._done = self._done, []
        return done

    def finish(self) -> list[Resumed[Outcome]]:
        """Stop watching, wait for every resume still running, and take what is left."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join()  # bounded by the stop: its gate refuses new steps, the fence parks an apply
        return self.collect()

    # -- the threads ---------------------------------------------------------------------------

    def _watch(self) -> None:
        while not self._stop.is_set():
            for provider in self._watched:
                if provider in self._started or self._stop.is_set():
                    continue
                try:
                    gained = self._valid(provider)
                except Exception:  # a fence that cannot answer is no lease; looked at again
                    log.exception("the lease of provider %s could not be read", provider)
                    gained = False
                if gained:
                    self._begin(provider)
            if len(self._started) == len(self._watched):
                return  # every watched provider resumed (or resuming): nothing left to watch
            self._stop.wait(self._poll)

    def _begin(self, provider: str) -> None:
        thread = threading.Thread(target=self._run, args=(provider,), name=f"xceprov-resume-{provider}", daemon=True)
        with self._lock:
            self._started.add(provider)
            self._threads.append(thread)
        log.info("lease of provider %s gained during the pass: its open ops are resumed now", provider)
        thread.start()

    def _run(self, provider: str) -> None:
        try:
            with contextlib.ExitStack() as stack:
                try:
                    stack.enter_context(self._hold(f"resume of {provider}"))
                except LeaseLost as exc:  # refused before it started: the daemon is stopping
                    done = Resumed(provider, self._failed(provider, "", f"not started: {_line(exc)}"), False)
                else:
                    with self._slots:
                        outcome, joined = self._resume(provider)
                    done = Resumed(provider, outcome, joined)
        except BaseException as exc:  # a thread's death must reach the pass report, not end silently
            log.exception("the resume of provider %s beside the pass failed", provider)
            done = Resumed(provider, self._failed(provider, f"{type(exc).__name__}: {_line(exc)}", ""), False)
        with self._lock:
            self._done.append(done)


def _line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:500]
