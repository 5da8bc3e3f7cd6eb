"""The local audit log: one JSON line per action that changes or could change cloud resources.

Appended with ``O_APPEND`` and fsync'd before the action is reported done, so the log survives
a crash of the orchestrator right after the action. Dry runs are logged too, marked as such.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

AUDIT_FILE = "audit.log"


def audit(state_dir: Path, action: str, **details: Any) -> Mapping[str, Any]:
    """Append one entry ``{time, host, user, action, ...details}`` and return it."""
    entry = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": socket.gethostname(),
        "user": getpass.getuser(),
        "pid": os.getpid(),
        "action": action,
        **details,
    }
    state_dir.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(entry, sort_keys=True, default=str) + "\n").encode()
    fd = os.open(state_dir / AUDIT_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return entry
