"""Structured logs: the fields of every record, decision fields, and hostile strings kept as data."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from orchestrator.daemon.logs import LogFormat, configure_logging, timeout_passed
from orchestrator.daemon.timeouts import NamedTimeout
from orchestrator.model.config import DaemonSettings, ProviderSettings
from orchestrator.model.text import printable

# A name anyone with access to the cloud account can give an instance.
HOSTILE = "web-1\n2026-12-01 10:00:00,000 ERROR orchestrator.daemon: lease lost\r\x1b[2J\u2028forged"
DECISION = {"op_id": "op-7f3a", "provider": "sim", "template": "cpu", "epoch": "3.12", "phase": "scale_out"}


@pytest.fixture
def capture() -> Iterator[tuple[io.StringIO, logging.Logger]]:
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    stream = io.StringIO()
    try:
        yield stream, logging.getLogger("orchestrator.daemon.test")
    finally:
        for handler in list(root.handlers):
            root.removeHandler(handler)
        for handler in saved_handlers:
            root.addHandler(handler)
        root.setLevel(saved_level)


def test_json_records_carry_the_fields_and_decision(capture: tuple[io.StringIO, logging.Logger]) -> None:
    stream, log = capture
    configure_logging("json", stream=stream)
    log.info("op %s committed", "op-7f3a", extra=DECISION)
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "INFO"
    assert record["logger"] == "orchestrator.daemon.test"
    assert record["message"] == "op op-7f3a committed"
    assert record["time"].endswith("+00:00")  # RFC 3339, UTC
    assert {key: record[key] for key in DECISION} == DECISION


def test_json_keeps_a_hostile_name_inside_its_record(capture: tuple[io.StringIO, logging.Logger]) -> None:
    stream, log = capture
    configure_logging("json", stream=stream)
    log.warning("host %s did not join", HOSTILE, extra={"instance": HOSTILE})
    text = stream.getvalue()
    assert text.isascii()
    (line,) = text.splitlines()  # splitlines also breaks on U+2028: it must not occur raw
    record = json.loads(line)
    assert record["message"] == f"host {HOSTILE} did not join"
    assert record["instance"] == HOSTILE


def test_text_is_one_line_per_record_whatever_the_name(capture: tuple[io.StringIO, logging.Logger]) -> None:
    stream, log = capture
    configure_logging("text", stream=stream)
    log.warning("host %s did not join", HOSTILE, extra={**DECISION, "instance": HOSTILE})
    log.info("next record")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2, lines
    first = lines[0]
    assert " WARNING orchestrator.daemon.test: host web-1\\n2026-12-01 10:00:00,000 ERROR" in first
    assert "\\r\\x1b[2J\\u2028forged did not join" in first
    assert "op_id=op-7f3a provider=sim template=cpu epoch=3.12 phase=scale_out" in first
    assert 'instance="web-1\\\\n2026-12-01' in first  # quoted (it has spaces), escapes kept visible
    assert "\x1b" not in stream.getvalue()
    assert lines[1].endswith("INFO orchestrator.daemon.test: next record")


def test_text_tracebacks_cannot_start_a_record(capture: tuple[io.StringIO, logging.Logger]) -> None:
    stream, log = capture
    configure_logging("text", stream=stream)
    try:
        raise ValueError(HOSTILE)
    except ValueError:
        log.exception("phase reclaim failed", extra={"phase": "reclaim"})
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith("ERROR orchestrator.daemon.test: phase reclaim failed phase=reclaim")
    assert len(lines) > 2 and all(line.startswith("    ") for line in lines[1:])
    assert any("forged" in line for line in lines[1:])


def test_escape_leaves_ordinary_text_alone() -> None:
    assert printable("ip-10-0-0-7.eu-west-1 ünïcode ok") == "ip-10-0-0-7.eu-west-1 ünïcode ok"
    assert printable("a\tb\x00c\x85d") == "a\\tb\\x00c\\x85d"


def test_a_passed_timeout_is_named_by_its_configuration_key(capture: tuple[io.StringIO, logging.Logger]) -> None:
    stream, log = capture
    configure_logging("json", stream=stream)
    timeout_passed(log, NamedTimeout.JOIN_DEADLINE, 900, HOSTILE, provider="sim", op_id="op-1")
    record = json.loads(stream.getvalue())
    assert record["message"] == f"join_deadline 900s passed: {HOSTILE}"
    assert record["timeout"] == "join_deadline" and record["provider"] == "sim" and record["level"] == "WARNING"


def test_every_named_timeout_is_a_configuration_key() -> None:
    keys = set(ProviderSettings.model_fields) | set(DaemonSettings.model_fields)
    missing = {t.value for t in NamedTimeout} - keys
    assert missing == set()


def journal_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> IO[str]:
    """A file standing in for the journal stream systemd connects: ``$JOURNAL_STREAM`` names it."""
    stream = open(tmp_path / "journal", "w+")  # noqa: SIM115 - closed by the test
    st = os.fstat(stream.fileno())
    monkeypatch.setenv("JOURNAL_STREAM", f"{st.st_dev}:{st.st_ino}")
    return stream


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_on_the_journal_stream_every_line_has_its_priority(
    capture: tuple[io.StringIO, logging.Logger], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: LogFormat
) -> None:
    _, log = capture
    with journal_file(tmp_path, monkeypatch) as stream:
        configure_logging(fmt, level=logging.DEBUG, stream=stream)
        log.debug("detail")
        log.info("host %s bootstrapped", "h1")
        log.warning("join_deadline passed")
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            log.exception("phase failed")
        log.critical("stopped")
        stream.seek(0)
        lines = stream.read().splitlines()
    assert [line[:3] for line in lines[:3]] == ["<7>", "<6>", "<4>"]
    # The error's traceback lines (text) keep the error's priority: journald reads each line alone.
    assert len(lines) > 5 if fmt == "text" else len(lines) == 5
    assert all(line.startswith("<3>") for line in lines[3:-1]) and lines[-1].startswith("<2>")
    if fmt == "json":  # what follows the prefix is the record, as a collector parses it
        assert json.loads(lines[1][3:])["message"] == "host h1 bootstrapped"


def test_a_stream_that_is_not_the_journal_s_has_no_prefix(
    capture: tuple[io.StringIO, logging.Logger], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, log = capture
    with journal_file(tmp_path, monkeypatch), open(tmp_path / "elsewhere", "w+") as stream:
        # A child that inherited $JOURNAL_STREAM but whose stderr was sent elsewhere.
        configure_logging("text", stream=stream)
        log.warning("join_deadline passed")
        stream.seek(0)
        assert stream.read().split(" ", 2)[2].startswith("WARNING ")
    monkeypatch.setenv("JOURNAL_STREAM", "not-a-device-and-inode")
    stream = io.StringIO()  # no descriptor at all
    configure_logging("text", stream=stream)
    log.warning("join_deadline passed")
    assert " WARNING " in stream.getvalue() and not stream.getvalue().startswith("<")
