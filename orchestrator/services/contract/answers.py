"""The answer of one action: its JSON document and the exit code of the one-shot form.

A failed action answers ``{"error": {"type", "message"[, "holder"]}}`` (``schemas.ErrorOutput``):
``type`` is ``bad_input`` (malformed document, unknown template, count out of range: exit 1),
``unknown_request`` (a machine the facts do not know: exit 1), ``held`` (another holder
fences the provider: exit 9, ``holder`` names it), ``unavailable`` (the controller or the
shared store cannot be reached: exit 75) or ``failed`` (anything else the toolkit refused, with
its own exit code). The first four change nothing. ``message`` is one line, control characters
escaped; it is also the document's top-level ``message``, where IBM's consumers read a failure's
reason (their examples answer ``{"message": "..."}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.errors import ContractRefused, LeaseHeld, RetryableError, XceprovError
from orchestrator.model.text import printable

BAD_INPUT_EXIT = ContractRefused.exit_code


@dataclass(frozen=True)
class ContractAnswer:
    """The JSON answer of one action and the one-shot exit code (0: done)."""

    document: dict[str, Any]
    exit_code: int

    @property
    def ok(self) -> bool:
        """Whether the action did what was asked."""
        return self.exit_code == 0


def one_line(message: str) -> str:
    """``message`` on one line: its lines joined, control characters escaped."""
    return printable("; ".join(line.strip() for line in message.splitlines() if line.strip()))


def answered(document: dict[str, Any]) -> ContractAnswer:
    """A successful answer."""
    return ContractAnswer(document, 0)


def error_answer(kind: str, message: str, exit_code: int, holder: str | None = None) -> ContractAnswer:
    """``{"error": {...}}`` with ``exit_code``."""
    body: dict[str, Any] = {"type": kind, "message": one_line(message)}
    if holder:
        body["holder"] = printable(holder)
    return ContractAnswer({"error": body, "message": body["message"]}, exit_code)


def refused(exc: XceprovError) -> ContractAnswer:
    """The error answer of a toolkit error, typed by what it means for the caller."""
    if isinstance(exc, ContractRefused):
        return error_answer(exc.kind, str(exc), exc.exit_code)
    if isinstance(exc, LeaseHeld):
        return error_answer("held", str(exc), exc.exit_code, exc.holder or None)
    if isinstance(exc, RetryableError):
        return error_answer("unavailable", str(exc), exc.exit_code)
    return error_answer("failed", str(exc), exc.exit_code)
