"""The daemon's status file, ``<state_dir>/daemon/status.json``: written after every pass, read by ``xceprov status``.

One JSON document (``format`` 1), 0600 in a 0700 directory, replaced atomically and durably
(``orchestrator.durable``), so a reader sees the previous document or the next one, never half
of one. Its members are documented in docs/daemon.md ("Status file"). The writer is the daemon
(``orchestrator.daemon.statusdoc`` builds the document); the reader is here, below both the
daemon and ``services``, so that ``xceprov status`` can read it without importing the daemon.

Whether a daemon is running is the reader's judgement from the document: its ``state``
(``running``, ``stopping``, ``stopped``), whether its ``pid`` is alive on this machine, and the
document's age against the daemon's own ``reconcile_interval``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from orchestrator import durable
from orchestrator.errors import FinalError
from orchestrator.model.redaction import hide_known_in

STATUS_DIR: Final = "daemon"
STATUS_FILE: Final = "status.json"
FORMAT: Final = 1
# A running daemon's document older than this many of its intervals is shown as stale: its loop
# may be stuck in a long pass (a burst) or hung (the watchdog restarts it then).
STALE_INTERVALS: Final = 3


def status_path(state_dir: Path) -> Path:
    """Where the daemon of ``state_dir`` writes its status."""
    return Path(state_dir) / STATUS_DIR / STATUS_FILE


def write_status(state_dir: Path, document: dict[str, Any]) -> Path:
    """Replace the status file with ``document`` (``format`` is set here); its path."""
    path = status_path(state_dir)
    durable.private_tree(Path(state_dir), STATUS_DIR)
    # Its last errors may quote a database password (in any form): written without it.
    durable.write_json_atomic(path, {**hide_known_in(document), "format": FORMAT})
    return path


@dataclass(frozen=True)
class DaemonStatus:
    """The last status document of a daemon and what can be said about it now."""

    path: Path
    document: dict[str, Any]
    age: float  # seconds since it was written (by this machine's wall clock)
    running: bool  # state running/stopping and its pid alive
    stale: bool  # running, but not rewritten for STALE_INTERVALS intervals

    @property
    def daemon(self) -> dict[str, Any]:
        """The ``daemon`` member: pid, instance id, state, started, interval, config."""
        value = self.document.get("daemon")
        return value if isinstance(value, dict) else {}


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user (the daemon's service account)
    return True


def read_status(state_dir: Path, now: float | None = None) -> DaemonStatus | None:
    """The daemon's last status document; None when no daemon ever wrote one here.

    ``FinalError`` (naming the file) when the file is there but is not a status document.
    """
    path = status_path(state_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except PermissionError:
        raise FinalError(f"{path}: not readable by this user (the daemon's state is 0700)") from None
    try:
        document = durable.parse_json(raw)
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ValueError(f"format {document.get('format') if isinstance(document, dict) else None!r}")
        info = document["daemon"]
        written = float(info["written"])
        interval = float(info["reconcile_interval"])
        pid = int(info["pid"])
        state = str(info["state"])
    except (ValueError, KeyError, TypeError) as exc:
        raise FinalError(f"{path}: not a daemon status file ({exc})") from None
    age = max(0.0, (time.time() if now is None else now) - written)
    running = state in ("running", "stopping") and _pid_alive(pid)
    return DaemonStatus(path, document, age, running, running and age > STALE_INTERVALS * interval)
