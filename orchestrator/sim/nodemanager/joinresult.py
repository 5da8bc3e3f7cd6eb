"""The worker's last join outcome, in a small JSON file a boot hook can wait for; stdlib only.

A host that joins by itself at boot (a baked image's first boot, docs/bootstrap.md) has nobody
watching over SSH: its boot hook starts the node manager and then reports on the console whether
the join went through. The controller's answer reaches only the worker, so the worker writes it
here (``xce-node-manager run --join-result FILE``, passed on to the worker)::

    {"v": 1, "outcome": "joined" | "refused" | "error", "code": "tokenInvalid",
     "message": "...", "manager_pid": 123, "at": 1765000000.0}

- ``joined``: the controller accepted the join; ``refused``: it refused it (``code`` is the
  refusal's reason code, the first word of its message, e.g. ``tokenExpired``); ``error``: no
  answer yet (the controller unreachable, TLS failed...), the worker keeps trying.
- ``manager_pid`` is the node manager that started this worker: a file left by an earlier boot
  names a process that no longer runs, so a reader can tell it from this boot's. The node manager
  also removes the file when it starts.
- The message is the controller's or the connection's (at most ``MESSAGE_LIMIT`` characters);
  the join token never is in it (the controller's refusals do not quote it).

This module ships in the artifact: it imports nothing but the standard library.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path

JOINED = "joined"
REFUSED = "refused"
ERROR = "error"
MESSAGE_LIMIT = 1000
_CODE = re.compile(r"[a-z][A-Za-z]{1,40}")


def refusal_code(message: str) -> str:
    """The reason code a refusal's message starts with (``tokenUsed: host ...``), else ``refused``."""
    first = message.split(":", 1)[0].strip()
    return first if _CODE.fullmatch(first) else REFUSED


def write(path: Path | None, outcome: str, message: str, code: str = "") -> None:
    """Record one outcome atomically (nothing when no file is configured; a failure to write is
    not the worker's business: it keeps joining)."""
    if path is None:
        return
    record = {
        "v": 1,
        "outcome": outcome,
        "code": code,
        "message": message[:MESSAGE_LIMIT],
        "manager_pid": os.getppid(),
        "at": time.time(),
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def clear(path: Path | None) -> None:
    """Forget an earlier outcome (the node manager starting)."""
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()
