"""The sinks' guard: a database password a Terraform error quotes reaches no log line, no audit
entry and no status document, in any form (issue 27 item 1)."""

from __future__ import annotations

import io
import json
import logging
import string
from pathlib import Path

import pytest

from orchestrator.daemon.logs import configure_logging
from orchestrator.model.config import Config
from orchestrator.workspace.audit import AUDIT_FILE, audit
from orchestrator.workspace.daemonstatus import status_path, write_status
from orchestrator.workspace.pgconn import pg_conn_str
from tests.tffake import site_config

PASSWORD = f"Pw0{string.punctuation}End7"
CONN_STR = f"postgresql://xce:{PASSWORD}@db.example/xceprov"
# What an error of a failed Terraform command says once decoded: Go's URL error quotes the
# string (%q: a backslash before '"' and '\'), and the cut one names a start of the password.
ERRORS = (
    f"terraform/roots/xcesim (provider sim): Error: parse {json.dumps(CONN_STR)}: net/url: invalid userinfo",
    'Error: parse "postgresql://xce:Pw0!\\"": invalid port ":Pw0!\\"" after host',
)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Config:
    """A pg site whose connection string was read (registered) the way every command reads it;
    the root logger's handlers and level are the test's own (configure_logging replaces them)."""
    text = site_config(tmp_path).config.model_dump(mode="json")
    text["terraform"]["backend"] = "pg"
    site = Config.model_validate(text)
    assert pg_conn_str(site, {"PG_CONN_STR": CONN_STR}) == CONN_STR
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", root.level)
    return site


def leaks(text: str) -> list[str]:
    return [marker for marker in ("Pw0", "End7") if marker in text]


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_pass_log_line_hides_the_password(config: Config, fmt: str) -> None:
    stream = io.StringIO()
    configure_logging(fmt, stream=stream)  # type: ignore[arg-type]
    log = logging.getLogger("orchestrator.daemon.test")
    for error in ERRORS:
        log.warning("reconcile pass failed: %s", error)
        try:
            raise RuntimeError(error)
        except RuntimeError:
            log.exception("phase %s failed", "scale_out")
    written = stream.getvalue()
    assert written.count("reconcile pass failed: ") == 2 and "***" in written
    assert leaks(written) == [], written


def test_the_audit_and_the_status_document_hide_the_password(config: Config) -> None:
    state = config.state_dir
    audit(state, "phase-failed", phase="scale_out", error=ERRORS[0], errors=list(ERRORS))
    write_status(state, {"phases": {"scale_out": {"last_error": ERRORS[1], "errors": {"sim": ERRORS[0]}}}})
    entry = json.loads((state / AUDIT_FILE).read_text())
    assert entry["phase"] == "scale_out" and "Error: parse " in entry["error"]
    status = json.loads(status_path(state).read_text())
    assert "invalid port" in status["phases"]["scale_out"]["last_error"]
    for text in ((state / AUDIT_FILE).read_text(), status_path(state).read_text()):
        assert leaks(text) == [] and "***" in text, text
