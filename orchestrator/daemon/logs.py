"""Structured logs of the daemon: ``text`` for people, ``json`` (one object a line) for collectors.

Every record has ``time``, ``level``, ``logger`` and ``message``; a decision's fields (``op_id``,
``provider``, ``template``, ``epoch``, ``phase``, ``instance``, ``timeout``) are passed with
``extra=`` and become JSON keys, or ``key=value`` after the message in text.

Strings from the cloud or the controller (instance names, tags, diagnostics) are data: log them
as arguments (``log.info("host %s joined", name)``), never as the format. In JSON they are
escaped by the encoder (ASCII only, so no raw line or paragraph separator either); in text every
control character and Unicode line break is written as an escape, so a hostile instance name
such as ``"x\\n2026-01-01 ERROR forged"`` stays inside its own line.
"""

from __future__ import annotations

import logging
import sys
from typing import IO, Any, Literal

from pythonjsonlogger.json import JsonFormatter

from orchestrator.daemon.timeouts import NamedTimeout
from orchestrator.model.redaction import HidingFormatter
from orchestrator.model.text import printable

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
DECISION_FIELDS = ("op_id", "provider", "template", "epoch", "phase", "instance", "timeout")


class TextFormatter(logging.Formatter):
    """One line per record: the message and decision fields escaped, tracebacks indented.

    Traceback lines are ours but may quote hostile text (an exception's message); each is
    escaped and indented, so no continuation line can look like the start of a record.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line (plus indented traceback lines)."""
        line = f"{self.formatTime(record)} {record.levelname} {record.name}: {printable(record.getMessage())}"
        fields = [
            f"{name}={_quote(printable(str(value)))}"
            for name in DECISION_FIELDS
            if (value := getattr(record, name, None)) is not None
        ]
        if fields:
            line = f"{line} {' '.join(fields)}"
        more: list[str] = []
        if record.exc_info:
            more += self.formatException(record.exc_info).splitlines()
        if record.stack_info:
            more += self.formatStack(record.stack_info).splitlines()
        return "\n".join([line, *(f"    {printable(text)}" for text in more)])


def _quote(value: str) -> str:
    """A field value readable by ``key=value`` parsers: quoted when it holds a space, quote or ``=``."""
    if value and not any(c in value for c in ' "='):
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def json_formatter() -> logging.Formatter:
    """JSON lines: ``time`` (RFC 3339, UTC), ``level``, ``logger``, ``message`` and every ``extra`` field."""
    return JsonFormatter(
        "{levelname}{name}{message}",
        style="{",
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp="time",
        json_ensure_ascii=True,  # no raw U+2028 or control character reaches the collector
    )


def configure_logging(fmt: LogFormat, level: int = logging.INFO, stream: IO[str] | None = None) -> logging.Handler:
    """Replace the root logger's handlers with one writing ``fmt`` to ``stream`` (stderr: the journal)."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    # HidingFormatter: a database password a message quotes (in any form) never reaches the journal.
    handler.setFormatter(HidingFormatter(json_formatter() if fmt == "json" else TextFormatter()))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler


def timeout_passed(logger: logging.Logger, timeout: NamedTimeout, limit_s: float, what: str, **fields: Any) -> None:
    """Log that a named timeout passed, under its configuration key: ``join_deadline 900s passed: ...``.

    ``what`` may be untrusted (an instance name): it is an argument, never the format.
    """
    logger.warning("%s %gs passed: %s", timeout.value, limit_s, what, extra={"timeout": timeout.value, **fields})
