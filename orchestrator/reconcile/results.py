"""What each phase of a pass found and did, typed: one frozen result per phase.

A phase returns its result; :func:`~orchestrator.reconcile.phases.run_phase` makes it the
phase's :class:`~orchestrator.reconcile.report.PhaseOutcome`, and the daemon's status and metrics
read its fields. ``to_json()`` is the one place each becomes the ``evidence`` member of its phase
in ``status.json`` (docs/daemon.md, "Status file"); the shapes there are promises, so these
methods give exactly the documented keys, in the documented order: where a result's fields are
named and ordered as its document's keys, ``to_json`` is :func:`dataclasses.asdict` of it.

The list and mapping members are filled while the phase runs (the result is made when the phase
starts, so that a helper can add an error to it); a scalar member that is only known at the end
(the scale-out's ``rounds``, a resume's ``gained``) is set with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


class PhaseResult(Protocol):
    """What every phase's result offers the pass: its errors and its ``evidence`` document."""

    @property
    def errors(self) -> Sequence[str]:
        """One line per error; the first is the phase's ``error`` (none: the phase went through)."""
        ...

    def to_json(self) -> dict[str, Any]:
        """The phase's ``evidence`` member of the status document."""
        ...


@dataclass(frozen=True)
class Skipped:
    """The phase chose not to run (no bootstrap play, the scale-out lock is another's)."""

    reason: str
    errors: Sequence[str] = ()

    def to_json(self) -> dict[str, Any]:
        """Nothing ran: no evidence (the reason is the phase's ``skipped``)."""
        return {}


@dataclass(frozen=True)
class ReadResult:
    """What the read saw: the snapshot's order and time, counts, leases."""

    term: int
    seq: int
    time: float
    hosts: int
    facts: Mapping[str, int]
    leased: Sequence[str]
    errors: Sequence[str] = ()

    def to_json(self) -> dict[str, Any]:
        """``snapshot``, ``hosts``, ``facts`` (count per provider), ``leased``."""
        return {
            "snapshot": {"term": self.term, "seq": self.seq, "time": self.time},
            "hosts": self.hosts,
            "facts": dict(self.facts),
            "leased": list(self.leased),
        }


@dataclass(frozen=True)
class ResumedOp:
    """An open op resumed to its end."""

    op: str
    outcome: str
    reason: str


@dataclass(frozen=True)
class WaitingOp:
    """A failed op whose backoff has not ended."""

    op: str
    retry_at: float


@dataclass(frozen=True)
class ResumeResult:
    """The resume phase: ops resumed, waiting, closed; keys no fact names (``untracked``).

    ``gained``: the provider whose lease came during the pass, for a resume beside it."""

    resumed: list[ResumedOp] = field(default_factory=list)
    waiting: list[WaitingOp] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    untracked: dict[str, list[str]] = field(default_factory=dict)
    gained: Sequence[str] = ()

    def to_json(self) -> dict[str, Any]:
        """``gained`` (beside the pass only), ``resumed``, ``waiting``, ``closed``, ``errors``, ``untracked``."""
        out = asdict(self)
        del out["gained"]
        return {"gained": list(self.gained), **out} if self.gained else out


@dataclass(frozen=True)
class GainedResume:
    """A resume beside the pass that did not run its phase to the end (refused at a stop, raised)."""

    gained: Sequence[str]
    errors: Sequence[str] = ()

    def to_json(self) -> dict[str, Any]:
        """Only ``gained``: nothing else is known."""
        return {"gained": list(self.gained)}


@dataclass(frozen=True)
class CreatedOp:
    """A create op that went through."""

    op: str
    provider: str
    template: str
    count: int


@dataclass(frozen=True)
class FailedCreate:
    """A create op that failed; ``closed`` when it was refused and closed (asked for elsewhere)."""

    op: str
    provider: str
    error: str
    closed: bool


@dataclass(frozen=True)
class ScaleOutResult:
    """The scale-out phase: its rounds (a refusal falls back to the next provider), creates, failures;
    and the warm pool's start ops (``started``), fill ops (``pooled``) and returned keys."""

    rounds: int = 0
    created: list[CreatedOp] = field(default_factory=list)
    failed: list[FailedCreate] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: list[CreatedOp] = field(default_factory=list)
    pooled: list[CreatedOp] = field(default_factory=list)
    pool_returned: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``rounds``, ``created``, ``failed``, ``errors``, and the pool's fields when it did anything."""
        out = asdict(self)
        for name in ("started", "pooled", "pool_returned"):
            if not out[name]:
                del out[name]  # a site without a warm pool reads the document it always read
        return out


@dataclass(frozen=True)
class HostBootstrap:
    """One host's bootstrap this pass: its outcome line, its attempt, what comes next."""

    outcome: str
    attempt: int
    next: str  # "done" | "retry" | "give-up", or "again" when the play was stopped (no attempt)


@dataclass(frozen=True)
class BootstrapResult:
    """The bootstrap phase: per host name; keys returned after giving up; breakers it moved."""

    hosts: dict[str, HostBootstrap] = field(default_factory=dict)
    returned: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    breakers: dict[str, str] = field(default_factory=dict)  # template -> position

    def to_json(self) -> dict[str, Any]:
        """``hosts``, ``returned``, ``errors``, and ``breakers`` when a host was given up."""
        out = asdict(self)
        if not self.breakers:
            del out["breakers"]
        return out


@dataclass(frozen=True)
class FirstBootFailure:
    """A first-boot host returned because its console said its boot failed (join tracking)."""

    provider: str
    template: str
    host: str
    key: str
    step: str
    message: str
    op: str  # the return op ("" when the return failed; tried again by the next pass's deadline)


@dataclass(frozen=True)
class JoinResult:
    """The join-tracking phase: first joins, hosts past ``join_deadline``, keys returned, records dropped."""

    joined: list[str] = field(default_factory=list)
    overdue: list[str] = field(default_factory=list)
    returned: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    # First-boot hosts whose outcome changed this pass (host name -> its line), and the hosts
    # returned because their first boot failed (not past a join_deadline: a bootstrap failure).
    first_boot: dict[str, str] = field(default_factory=dict)
    first_boot_failed: list[FirstBootFailure] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``joined``, ``overdue`` (host names), ``returned`` (keys), ``errors``, ``forgotten``;
        ``first_boot`` and ``first_boot_failed`` when a first-boot host's outcome changed."""
        out = asdict(self)
        for name in ("first_boot", "first_boot_failed"):
            if not out[name]:
                del out[name]
        return out


@dataclass(frozen=True)
class KeptHost:
    """A reclaim candidate kept, and why; ``key`` and ``reason`` once its close was judged."""

    host: str
    why: str
    key: str = ""
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        """``host`` and ``why``; ``key`` and ``reason`` between them when known."""
        if not self.key:
            return {"host": self.host, "why": self.why}
        return {"host": self.host, "key": self.key, "reason": self.reason, "why": self.why}


@dataclass(frozen=True)
class ReclaimResult:
    """The reclaim phase: how many candidates, the keys returned, the hosts kept."""

    candidates: int = 0
    returned: list[str] = field(default_factory=list)
    kept: list[KeptHost] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``candidates``, ``returned`` (keys), ``kept``, ``errors``."""
        return {**asdict(self), "kept": [k.to_json() for k in self.kept]}
