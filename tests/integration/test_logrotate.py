"""The shipped logrotate stanza for the audit log: logrotate accepts it, and a rotation loses no entry."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from orchestrator.workspace.audit import AUDIT_FILE, audit

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
STANZA = ROOT / "contrib" / "logrotate" / "xceprov"
SHIPPED_PATH = "/var/lib/xceprov/audit.log"  # the state directory of contrib/systemd/xceprov.service
LOGROTATE = shutil.which("logrotate") or shutil.which("logrotate", path="/usr/sbin:/sbin")

needs_logrotate = pytest.mark.skipif(
    LOGROTATE is None, reason="logrotate is not installed (Debian: apt install logrotate)"
)


def _logrotate(*args: str) -> subprocess.CompletedProcess[str]:
    assert LOGROTATE is not None
    return subprocess.run([LOGROTATE, *args], capture_output=True, text=True, check=False, timeout=60)


@needs_logrotate
def test_logrotate_accepts_the_shipped_stanza(tmp_path: Path) -> None:
    out = _logrotate("-d", "-s", str(tmp_path / "status"), str(STANZA))

    assert out.returncode == 0, out.stdout + out.stderr
    assert "error" not in (out.stdout + out.stderr).lower(), out.stdout + out.stderr
    assert f"considering log {SHIPPED_PATH}" in out.stdout + out.stderr


@needs_logrotate
def test_a_rotation_by_the_stanza_loses_no_audit_entry(tmp_path: Path) -> None:
    state = tmp_path / "state"
    audit(state, "before-rotation", n=1)
    audit(state, "before-rotation", n=2)
    conf = tmp_path / "xceprov.logrotate"
    conf.write_text(STANZA.read_text().replace(SHIPPED_PATH, str(state / AUDIT_FILE)))

    out = _logrotate("-f", "-s", str(tmp_path / "status"), str(conf))
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (state / AUDIT_FILE).exists()  # renamed, not copied and truncated: nocreate
    audit(state, "after-rotation", n=3)

    (rotated,) = state.glob(f"{AUDIT_FILE}-*")
    assert [json.loads(line)["n"] for line in rotated.read_text().splitlines()] == [1, 2]
    assert [json.loads(line)["n"] for line in (state / AUDIT_FILE).read_text().splitlines()] == [3]
    assert (state / AUDIT_FILE).stat().st_mode & 0o777 == 0o600
