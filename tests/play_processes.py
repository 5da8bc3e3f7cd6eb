"""The ``ansible-playbook`` processes a test started, found by a value of their environment."""

from __future__ import annotations

import contextlib
from pathlib import Path


def playbooks_with(marker: str) -> list[int]:
    """Pids of running ``ansible-playbook`` processes (and their workers) whose environment holds
    ``marker`` (e.g. ``XCEPROV_CONFIG=<the test's site>/xceprov.yaml``, which reaches the play)."""
    found: list[int] = []
    wanted = marker.encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if b"ansible-playbook" not in (entry / "cmdline").read_bytes():
                continue
            if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # a zombie ran nothing more; its parent is about to reap it
            if wanted in (entry / "environ").read_bytes().split(b"\0"):
                found.append(int(entry.name))
    return found
