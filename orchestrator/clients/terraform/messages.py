"""Terraform's machine-readable UI messages (``-json``) as typed, frozen values.

Only the messages the orchestrator acts on are modelled: planned changes, drift, apply
hooks, change summaries, outputs and diagnostics. Everything else (version banners, progress
logs) is ignored. Error diagnostics become one :class:`~orchestrator.errors.TerraformError`
whose message is Terraform's own text, one line per diagnostic, prefixed with the file and
line Terraform names (``main.tf:12: Error: Unsupported argument: ...``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.errors import StaleState, TerraformError

Action = Literal["create", "update", "delete", "replace", "read", "no-op"]
Severity = Literal["error", "warning"]

# Terraform's action names → ours. A pure move or import changes no object; a "forget"
# (``removed`` block with destroy = false) drops it from state without touching it.
_ACTIONS: Mapping[str, Action] = {
    "create": "create",
    "update": "update",
    "delete": "delete",
    "replace": "replace",
    "read": "read",
    "noop": "no-op",
    "no-op": "no-op",
    "move": "no-op",
    "import": "no-op",
    "forget": "no-op",
    "remove": "no-op",
}

# Summaries of the diagnostics Terraform gives when a saved plan no longer fits the state.
_STALE_SUMMARIES = ("saved plan is stale", "saved plan does not match the given state")


@dataclass(frozen=True)
class Diagnostic:
    """One Terraform diagnostic; ``filename``/``line`` are set when Terraform names a source range."""

    severity: Severity
    summary: str
    detail: str = ""
    filename: str | None = None
    line: int | None = None
    address: str | None = None  # the resource it is about, when Terraform names one (apply errors)

    def __str__(self) -> str:
        where = f"{self.filename}:{self.line}: " if self.filename and self.line is not None else ""
        text = f"{where}{self.severity.capitalize()}: {_one_line(self.summary)}"
        detail = _one_line(self.detail)
        return f"{text}: {detail}" if detail else text


@dataclass(frozen=True)
class ResourceChange:
    """One resource instance a plan would change, has drifted, or an apply changed."""

    addr: str
    module: str
    type: str
    name: str
    key: int | str | None
    action: Action


@dataclass(frozen=True)
class Summary:
    """Counts from Terraform's ``change_summary`` message."""

    add: int = 0
    change: int = 0
    remove: int = 0


@dataclass(frozen=True)
class PlanResult:
    """What a plan would do. ``drift`` lists objects changed outside Terraform (refresh)."""

    changes: tuple[ResourceChange, ...]
    drift: tuple[ResourceChange, ...]
    diagnostics: tuple[Diagnostic, ...]
    summary: Summary
    has_changes: bool
    plan_file: str | None = None


@dataclass(frozen=True)
class ApplyResult:
    """What an apply did: completed changes, failed resources, counts and root outputs."""

    changes: tuple[ResourceChange, ...]
    failed: tuple[ResourceChange, ...]
    diagnostics: tuple[Diagnostic, ...]
    summary: Summary
    outputs: Mapping[str, Any] = field(default_factory=dict)
    # The caller asked Terraform to stop (``should_stop``): it finished what was in flight,
    # wrote its state and started nothing new; the rest of the plan was not applied.
    interrupted: bool = False


HookStage = Literal["start", "complete", "errored"]
_HOOK_STAGES: Mapping[str, HookStage] = {
    "apply_start": "start",
    "apply_complete": "complete",
    "apply_errored": "errored",
}


@dataclass(frozen=True)
class ApplyHook:
    """One resource step of a running apply: Terraform started, completed or failed its change."""

    stage: HookStage
    change: ResourceChange


ApplyEvent = ApplyHook | Diagnostic
ApplyEventFn = Callable[[ApplyEvent], None]


def apply_event(message: Mapping[str, Any]) -> ApplyEvent | None:
    """The apply step or diagnostic one ``apply -json`` message is, or None for any other message."""
    kind = message.get("type")
    if kind in _HOOK_STAGES and isinstance(message.get("hook"), Mapping):
        return ApplyHook(_HOOK_STAGES[str(kind)], resource_change(message["hook"]))
    if kind == "diagnostic" and isinstance(message.get("diagnostic"), Mapping):
        return diagnostic(message["diagnostic"])
    return None


def parse_lines(text: str) -> list[dict[str, Any]]:
    """Split ``-json`` stdout into message objects; lines that are not JSON objects are skipped."""
    messages: list[dict[str, Any]] = []
    for raw in text.splitlines():
        raw = raw.strip()
        if not raw.startswith("{"):
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            messages.append(value)
    return messages


def diagnostic(value: Mapping[str, Any]) -> Diagnostic:
    """Build a :class:`Diagnostic` from Terraform's diagnostic object (UI message or validate)."""
    severity: Severity = "warning" if value.get("severity") == "warning" else "error"
    rng = value.get("range") or {}
    start = rng.get("start") or {}
    line = start.get("line")
    return Diagnostic(
        severity=severity,
        summary=str(value.get("summary", "")),
        detail=str(value.get("detail", "") or ""),
        filename=rng.get("filename") or None,
        line=int(line) if isinstance(line, int) else None,
        address=str(value["address"]) if value.get("address") else None,
    )


def diagnostics(messages: Iterable[Mapping[str, Any]]) -> tuple[Diagnostic, ...]:
    """All diagnostics in a message stream, in order, without repeats."""
    seen: dict[Diagnostic, None] = {}
    for msg in messages:
        if msg.get("type") == "diagnostic" and isinstance(msg.get("diagnostic"), Mapping):
            seen.setdefault(diagnostic(msg["diagnostic"]), None)
    return tuple(seen)


class ApplyFailed(TerraformError):
    """An apply reported errors; ``result`` still tells what it completed before failing.

    Callers that must record what exists (instance facts) read ``result.changes``; the rest
    treat it as any :class:`~orchestrator.errors.TerraformError`.
    """

    def __init__(self, message: str, result: ApplyResult) -> None:
        super().__init__(message)
        self.result = result


def error_for(diags: Sequence[Diagnostic], fallback: str = "") -> TerraformError | StaleState | None:
    """The error that ``diags`` amount to, or None when they hold no error.

    A stale saved plan becomes :class:`StaleState`; other errors one :class:`TerraformError`
    with one line per error diagnostic. ``fallback`` (Terraform's stderr, say) is used when a
    command failed without any error diagnostic; pass it only for a failed command.
    """
    errors = [d for d in diags if d.severity == "error"]
    for d in errors:
        if d.summary.strip().lower().startswith(_STALE_SUMMARIES):
            return StaleState(f"saved plan is stale: {_one_line(d.detail) or _one_line(d.summary)}")
    if errors:
        return TerraformError("\n".join(str(d) for d in errors))
    if fallback.strip():
        return TerraformError(_fallback_text(fallback))
    return None


def raise_for_errors(diags: Sequence[Diagnostic], fallback: str = "") -> None:
    """Raise :func:`error_for`'s error, if any."""
    err = error_for(diags, fallback)
    if err is not None:
        raise err


def resource_change(change: Mapping[str, Any]) -> ResourceChange:
    """Build a :class:`ResourceChange` from a message's ``change`` or ``hook`` object."""
    res = change.get("resource") or {}
    raw_action = str(change.get("action", "no-op"))
    key = res.get("resource_key")
    return ResourceChange(
        addr=str(res.get("addr", "")),
        module=str(res.get("module", "")),
        type=str(res.get("resource_type", "")),
        name=str(res.get("resource_name", "")),
        key=key if isinstance(key, int | str) else None,
        action=_ACTIONS.get(raw_action, "no-op"),
    )


def summary(messages: Iterable[Mapping[str, Any]]) -> Summary:
    """The last ``change_summary`` of a stream (zeros when there is none)."""
    found = Summary()
    for msg in messages:
        if msg.get("type") == "change_summary":
            counts = msg.get("changes") or {}
            found = Summary(
                add=int(counts.get("add", 0)),
                change=int(counts.get("change", 0)),
                remove=int(counts.get("remove", 0)),
            )
    return found


def plan_result(
    messages: Sequence[Mapping[str, Any]], *, exit_code: int | None = None, plan_file: str | None = None
) -> PlanResult:
    """Interpret a ``plan -json`` stream. Raises on error diagnostics.

    With ``-detailed-exitcode`` Terraform's exit code (2 = changes) decides ``has_changes``;
    without it, any planned change or drift counts.
    """
    diags = diagnostics(messages)
    raise_for_errors(diags)
    changes = tuple(
        resource_change(m["change"]) for m in messages if m.get("type") == "planned_change" and "change" in m
    )
    drift = tuple(resource_change(m["change"]) for m in messages if m.get("type") == "resource_drift" and "change" in m)
    has_changes = exit_code == 2 if exit_code is not None else any(c.action != "no-op" for c in changes + drift)
    return PlanResult(
        changes=changes,
        drift=drift,
        diagnostics=diags,
        summary=summary(messages),
        has_changes=has_changes,
        plan_file=plan_file,
    )


def apply_result(messages: Sequence[Mapping[str, Any]], *, interrupted: bool = False) -> ApplyResult:
    """Interpret an ``apply -json`` stream.

    Raises :class:`StaleState` for a stale saved plan and :class:`ApplyFailed` (carrying the
    partial result) on other error diagnostics. For an apply we ``interrupted`` on purpose,
    the errors of the halt itself ("execution halted" for what never started) are expected:
    they stay in ``diagnostics`` and the result has ``interrupted=True``.
    """
    diags = diagnostics(messages)
    done = tuple(resource_change(m["hook"]) for m in messages if m.get("type") == "apply_complete" and "hook" in m)
    failed = tuple(resource_change(m["hook"]) for m in messages if m.get("type") == "apply_errored" and "hook" in m)
    outputs: dict[str, Any] = {}
    for m in messages:
        if m.get("type") == "outputs" and isinstance(m.get("outputs"), Mapping):
            outputs = {k: v.get("value") for k, v in m["outputs"].items() if isinstance(v, Mapping)}
    result = ApplyResult(done, failed, diags, summary(messages), outputs, interrupted=interrupted)
    err = error_for(diags)
    if isinstance(err, StaleState):
        raise err
    if err is not None and not interrupted:
        raise ApplyFailed(err.message, result)
    return result


def validate_diagnostics(document: Mapping[str, Any]) -> tuple[Diagnostic, ...]:
    """Diagnostics of a ``validate -json`` document (a single JSON object, not a stream)."""
    return tuple(diagnostic(d) for d in document.get("diagnostics") or () if isinstance(d, Mapping))


_BOX = re.compile(r"^[╷│╵]\s?")
_ON_LINE = re.compile(r"^\s*on (?P<file>\S.*?) line (?P<line>\d+)")


def human_diagnostics(text: str) -> tuple[Diagnostic, ...]:
    """Parse Terraform's human (``-no-color``) diagnostics, for commands without ``-json`` (fmt)."""
    found: list[Diagnostic] = []
    current: dict[str, Any] | None = None

    def close() -> None:
        if current is not None:
            found.append(
                Diagnostic(
                    current["severity"],
                    current["summary"],
                    " ".join(current["detail"]),
                    current["filename"],
                    current["line"],
                )
            )

    for raw in text.splitlines():
        ln = _BOX.sub("", raw.rstrip())
        if ln.startswith(("Error: ", "Warning: ")):
            close()
            head, _, rest = ln.partition(": ")
            current = {
                "severity": "warning" if head == "Warning" else "error",
                "summary": rest.strip(),
                "detail": [],
                "filename": None,
                "line": None,
            }
            continue
        if current is None or not ln.strip():
            continue
        m = _ON_LINE.match(ln)
        if m and current["filename"] is None:
            current["filename"], current["line"] = m.group("file"), int(m.group("line"))
        elif not ln.startswith(" "):  # indented lines are the source snippet
            current["detail"].append(ln.strip())
    close()
    return tuple(found)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fallback_text(stderr: str) -> str:
    diags = [d for d in human_diagnostics(stderr) if d.severity == "error"]
    if diags:
        return "\n".join(str(d) for d in diags)
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return "terraform failed: " + (" ".join(lines[-3:]) if lines else "no output")
