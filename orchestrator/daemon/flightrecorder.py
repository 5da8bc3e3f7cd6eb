"""The flight recorder: what the daemon saw and decided, as a recording (docs/recording.md).

The daemon hands it each demand snapshot the link receives (:meth:`FlightRecorder.demand`),
each host event (:meth:`~FlightRecorder.host_event`), each fact its ops commit (op and
host timings: :meth:`~FlightRecorder.facts`), each pass's report (decisions, refusals:
:meth:`~FlightRecorder.after_pass`), the noticed hosts after each status (:meth:`~FlightRecorder.notices`)
and the configuration at start and at each reload taken (:meth:`~FlightRecorder.config`).
Only changes are written: a demand snapshot equal to the last one, a pass whose decisions equal
the last pass's, a notice already written, the same configuration again write nothing.

Written through :class:`~orchestrator.workspace.recordings.SegmentWriter` under
``<state_dir>/recordings/`` (``daemon.recording``): appended and flushed to the operating system
per record, never fsync'd (a daemon crash loses nothing written; a machine crash what the kernel
had not written yet, about the last second or so). A write that fails is logged once (until one
goes through again), counted in ``xceprov_recording_write_failures_total``, and never fails the
caller: the recorder never stops the daemon.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

from prometheus_client import Counter

from orchestrator.clients.controller.types import HostEvent
from orchestrator.model.config import Config, RecordingSettings
from orchestrator.model.demand import DemandSnapshot
from orchestrator.model.facts import Fact, FactKind
from orchestrator.model.offerings import placements_of
from orchestrator.model.recording import (
    CONFIG,
    DECISION,
    HOST,
    NOTICE,
    OP,
    REFUSAL,
    Record,
    demand_record,
    demand_templates,
)
from orchestrator.reconcile.reasons import reasons_json
from orchestrator.reconcile.report import PassReport, decision_json
from orchestrator.reconcile.results import ScaleOutResult
from orchestrator.workspace.recordings import SegmentWriter, recordings_dir

log = logging.getLogger(__name__)

# The facts the recording keeps, as (kind, event): an op's timings (about to create, created,
# about to terminate) and a host's (expected by the controller, returned, lost); orphan facts are
# not timings.
FACT_EVENTS: Mapping[FactKind, tuple[str, str]] = {
    FactKind.REQUEST_INTENT: (OP, "intent"),
    FactKind.INSTANCE_CREATED: (OP, "created"),
    FactKind.RETURNING: (OP, "returning"),
    FactKind.EXPECTED_HOST: (HOST, "expected"),
    FactKind.RETURNED: (HOST, "returned"),
    FactKind.LOST: (HOST, "lost"),
}


class RecordingMetrics:
    """``xceprov_recording_records_total{kind}`` and ``xceprov_recording_write_failures_total``."""

    def __init__(self, registry: Any) -> None:
        self.records = Counter(
            "xceprov_recording_records", "Flight recorder records written", ["kind"], registry=registry
        )
        self.failures = Counter(
            "xceprov_recording_write_failures",
            "Flight recorder writes that failed (the record is lost)",
            registry=registry,
        )


def config_record(config: Config, now: float) -> Record:
    """The config record: a digest of the whole configuration and its policy-relevant settings
    (no module settings, tags or credentials)."""
    settings = {
        "reconcile_interval": config.daemon.reconcile_interval,
        "policy": config.policy.model_dump(mode="json"),
        "providers": {
            name: provider.model_dump(mode="json", exclude={"settings", "tags"})
            for name, provider in sorted(config.providers.items())
        },
        "templates": {
            name: {p: side.model_dump(mode="json", exclude_none=True) for p, side in sorted(t.providers.items())}
            for name, t in sorted(config.templates.items())
        },
    }
    whole = json.dumps(config.model_dump(mode="json"), sort_keys=True, default=str).encode()
    return Record(now, CONFIG, {"digest": "sha256:" + hashlib.sha256(whole).hexdigest(), "settings": settings})


def decision_record(report: PassReport, now: float) -> Record | None:
    """The pass's decisions with their reasons and the ops started (None: it decided nothing)."""
    if report.result("scale-out", ScaleOutResult) is None:
        return None
    decisions = [decision_json(d) for d in report.decisions if d.outcome != "no-gap" or d.ops]
    return Record(
        now, DECISION, {"trigger": report.trigger, "decisions": decisions, "reasons": reasons_json(report.reasons)}
    )


def fact_record(fact: Fact, now: float) -> Record | None:
    """The op or host record of a committed fact (None: not a timing)."""
    found = FACT_EVENTS.get(fact.kind)
    if found is None:
        return None
    kind, event = found
    data: dict[str, Any] = (
        {"op": fact.op_id, "provider": fact.provider, "event": event}
        if kind == OP
        else {"host": fact.host_name, "event": event, "provider": fact.provider, "op": fact.op_id}
    )
    for name, value in (
        ("template", fact.template),
        ("key", fact.instance_key),
        ("instance", fact.instance_id),
        ("host", fact.host_name),
    ):
        if value:
            data[name] = value
    if fact.kind is FactKind.REQUEST_INTENT:
        data["count"] = fact.count
        placements = placements_of(fact.detail) if fact.detail else ()
        if placements:
            data["placements"] = [[p.offering, p.count] for p in placements]
    if fact.kind in (FactKind.LOST, FactKind.RETURNED) and fact.detail:
        data["reason"] = fact.detail.splitlines()[0]
    return Record(fact.committed or now, kind, data)


def host_record(event: HostEvent, now: float) -> Record:
    """The host record of a controller host event."""
    host = event.host
    data: dict[str, Any] = {"host": host.host_name, "event": event.kind, "state": host.state}
    for name, value in (
        ("template", host.template),
        ("provider", host.provider),
        ("op", host.op_id),
        ("key", host.instance_key),
        ("instance", host.instance_id),
    ):
        if value:
            data[name] = value
    return Record(event.time or now, HOST, data)


F = TypeVar("F", bound=Callable[..., None])


def _never_raises(method: F) -> F:
    """``method`` made safe for the daemon: whatever it raises is logged once and counted."""

    @functools.wraps(method)
    def safe(self: FlightRecorder, *args: Any) -> None:
        try:
            method(self, *args)
        except Exception as exc:  # a bug or a strange value must not reach the loop or the link
            self._failed(exc)

    return cast(F, safe)


class FlightRecorder:
    """The daemon's recorder (module docstring); every method is safe from any thread."""

    def __init__(
        self,
        state_dir: Path,
        settings: RecordingSettings,
        clock: Callable[[], float],
        metrics: RecordingMetrics | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.writer = SegmentWriter(
            recordings_dir(state_dir), clock, segment=settings.segment, keep=settings.keep, head=self._head
        )
        self._lock = threading.Lock()
        self._demand: Record | None = None
        self._config: Record | None = None
        self._decisions: Any = None
        self._notices: set[str] = set()
        self._failing = False

    # -- what arrives ---------------------------------------------------------------------------

    @_never_raises
    def demand(self, snapshot: DemandSnapshot) -> None:
        """A demand snapshot the link received (written when it differs from the last one)."""
        now = self.clock()
        record = demand_record(snapshot, now)
        with self._lock:
            last = self._demand
            if last is not None and last.data["templates"] == demand_templates(snapshot):
                return
            self._write(record)
            self._demand = record

    @_never_raises
    def host_event(self, event: HostEvent) -> None:
        """A host event from the controller."""
        with self._lock:
            self._write(host_record(event, self.clock()))

    @_never_raises
    def facts(self, facts: Sequence[Fact]) -> None:
        """Facts an op committed: the op and host timings among them."""
        now = self.clock()
        with self._lock:
            for fact in facts:
                record = fact_record(fact, now)
                if record is not None:
                    self._write(record)

    @_never_raises
    def after_pass(self, report: PassReport) -> None:
        """A pass's decisions (when they changed) and the refusals it recorded."""
        now = self.clock()
        record = decision_record(report, now)
        with self._lock:
            if record is not None:
                compared = (record.data["decisions"], record.data["reasons"])
                if compared != self._decisions:
                    self._write(record)
                    self._decisions = compared
            for refusal in report.refused:
                self._write(Record(refusal.last or now, REFUSAL, refusal.evidence()))

    @_never_raises
    def notices(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """The noticed hosts as the status shows them: each new one (or one that changed) written once."""
        now = self.clock()
        with self._lock:
            for row in rows:
                identity = json.dumps(row, sort_keys=True, default=str)
                if identity in self._notices:
                    continue
                self._notices.add(identity)
                template = row.get("template")
                extra = {"template": template} if isinstance(template, str) and template else {}
                self._write(Record(now, NOTICE, {"notice": dict(row), **extra}))

    @_never_raises
    def config(self, config: Config) -> None:
        """The configuration in force (at start, at each reload taken); written when its digest changed."""
        record = config_record(config, self.clock())
        with self._lock:
            if self._config is not None and self._config.data["digest"] == record.data["digest"]:
                return
            self._write(record)
            self._config = record

    @_never_raises
    def reload(self, config: Config) -> None:
        """A reloaded configuration: its ``daemon.recording`` in force from now, its config record."""
        with self._lock:
            self.settings = config.daemon.recording
            self.writer.segment, self.writer.keep = self.settings.segment, self.settings.keep
        self.config(config)

    def close(self) -> None:
        """Finish the current segment (at stop)."""
        with self._lock:
            try:
                self.writer.close()
            except OSError as exc:
                self._failed(exc)

    # -- writing --------------------------------------------------------------------------------

    def _head(self, now: float) -> list[Record]:
        # A new segment begins with the standing config and demand (the writer marks them carried).
        del now
        return [r for r in (self._config, self._demand) if r is not None]

    def _write(self, record: Record) -> None:
        if not self.settings.enabled:
            return
        try:
            self.writer.write(record)
        except (OSError, ValueError) as exc:
            self._failed(exc)
            return
        if self.metrics is not None:
            self.metrics.records.labels(record.kind).inc()
        if self._failing:
            log.info("flight recorder writes again")
            self._failing = False

    def _failed(self, exc: Exception) -> None:
        if self.metrics is not None:
            self.metrics.failures.inc()
        if not self._failing:
            log.warning("flight recorder: a record was not written (said once until one is): %s", exc)
            self._failing = True
        self.writer.drop()  # the next record starts a new segment
