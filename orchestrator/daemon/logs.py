"""Structured logs of the daemon: ``text`` for people, ``json`` (one object a line) for collectors.

Every record has ``time``, ``level``, ``logger`` and ``message``; a decision's fields (``op_id``,
``provider``, ``template``, ``epoch``, ``phase``, ``instance``, ``timeout``) are passed with
``extra=`` and become JSON keys, or ``key=value`` after the message in text.

Under systemd, stderr is a stream to the journal, which reads a ``<N>`` prefix on each line as
that line's syslog priority (sd-daemon(3): ``<3>`` error, ``<4>`` warning, ``<6>`` info,
``<7>`` debug): :func:`configure_logging` adds it to every line of a record when
``$JOURNAL_STREAM`` names the stream it writes to (systemd sets the variable to the
``device:inode`` of the stream it connected; a child whose stderr went elsewhere but inherited
the variable gets no prefix), so ``journalctl -p warning`` shows the warnings and errors, in
text or JSON. python-systemd's ``JournalHandler`` would add fields, but is a C extension built
against libsystemd; the prefix needs nothing and is what systemd documents for services.

Strings from the cloud or the controller (instance names, tags, diagnostics) are data: log them
as arguments (``log.info("host %s joined", name)``), never as the format. In JSON they are
escaped by the encoder (ASCII only, so no raw line or paragraph separator either); in text every
control character and Unicode line break is written as an escape, so a hostile instance name
such as ``"x\\n2026-01-01 ERROR forged"`` stays inside its own line.
"""

from __future__ import annotations

import io
import logging
import os
import sys
from collections.abc import Mapping
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


def syslog_priority(levelno: int) -> int:
    """The syslog priority of a logging level (sd-daemon(3)'s ``SD_CRIT`` ... ``SD_DEBUG``)."""
    for floor, priority in ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6)):
        if levelno >= floor:
            return priority
    return 7


class JournalPrefixed(logging.Formatter):
    """Another formatter's output with the record's ``<N>`` priority before every line (journald
    reads each line as an entry of its own, so a traceback's lines keep the error's priority)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        """The inner formatter's text, each line prefixed."""
        prefix = f"<{syslog_priority(record.levelno)}>"
        return "\n".join(prefix + line for line in self.inner.format(record).split("\n"))


def writes_to_journal(stream: IO[str], environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``stream`` is the journal stream systemd connected (``$JOURNAL_STREAM`` is its
    ``device:inode``)."""
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    if ":" not in value:
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):  # a stream with no descriptor (tests)
        return False
    return value == f"{st.st_dev}:{st.st_ino}"


def configure_logging(fmt: LogFormat, level: int = logging.INFO, stream: IO[str] | None = None) -> logging.Handler:
    """Replace the root logger's handlers with one writing ``fmt`` to ``stream`` (stderr: the
    journal, with each line's priority when ``$JOURNAL_STREAM`` says it is)."""
    out = stream if stream is not None else sys.stderr
    handler = logging.StreamHandler(out)
    # HidingFormatter: a database password a message quotes (in any form) never reaches the journal.
    formatter = HidingFormatter(json_formatter() if fmt == "json" else TextFormatter())
    handler.setFormatter(JournalPrefixed(formatter) if writes_to_journal(out) else formatter)
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
