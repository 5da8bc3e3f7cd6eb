"""The local audit log: one JSON line per action that changes or could change cloud resources.

Appended with ``O_APPEND`` and fsync'd before the action is reported done, so the log survives
a crash of the orchestrator right after the action. Dry runs are logged too, marked as such.
The log is 0600 in the private state directory: entries name instances, ops and bundles.
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

from orchestrator import durable
from orchestrator.model.redaction import hide_known_in

AUDIT_FILE = "audit.log"


def audit(state_dir: Path, action: str, **details: Any) -> Mapping[str, Any]:
    """Append one entry ``{time, host, user, action, ...details}`` and return it."""
    entry = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": socket.gethostname(),
        "user": getpass.getuser(),
        "pid": os.getpid(),
        "action": action,
        # A Terraform error quoting a database password (in any form) is written without it.
        **hide_known_in(details),
    }
    durable.private_dir(state_dir)
    line = (json.dumps(entry, sort_keys=True, default=str) + "\n").encode()
    path = state_dir / AUDIT_FILE
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, durable.PRIVATE_FILE)
    try:
        # A log made by an older version (0640) is narrowed on the next entry.
        os.fchmod(fd, durable.PRIVATE_FILE)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        durable.fsync_dir(state_dir)  # the new file's name must survive a crash too
    return entry
