"""The console output of a simulated instance, as a cloud's ``GetConsoleOutput`` returns it.

A simulated host's console is its boot process's stdout and stderr, which the host manager (the
hypervisor here) captures in ``<sim_state_dir>/hosts/<instance-id>/boot.log``; at boot the host
prints its SSH host keys there (``cloudinit.keys_to_console``). This module is the cloud's side
of reading it: by instance id, with the address the cloud booted that instance with, the first
64 KiB only (EC2 also caps the output at 64 KiB; the first part is the boot, which is what a
reader of host keys wants), or the latest 64 KiB (``latest``: where a first boot's result line is).

The text is whatever the host wrote: the reader (``orchestrator.clients.ansible.hostkeys``)
treats it as untrusted. The instance id is checked to be one before it names a directory.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CONSOLE_LIMIT: Final = 64 * 1024
# The simulated cloud's ids (``i-`` and 12 hex digits); nothing else may name a host directory.
_INSTANCE_ID: Final = re.compile(r"i-[0-9a-f]{1,32}")


@dataclass(frozen=True)
class ConsoleOutput:
    """One instance's console: its id and address as the cloud knows them, and the text."""

    instance_id: str
    address: str
    text: str


def console_output(sim_state_dir: Path, instance_id: str, *, latest: bool = False) -> ConsoleOutput | None:
    """The console of ``instance_id`` so far, or ``None`` when its host has not booted (or no such host).

    ``latest``: the last 64 KiB instead of the first (EC2's ``Latest=true``): where a boot's
    result line is, at the end of a boot whose output may be longer.
    """
    if not _INSTANCE_ID.fullmatch(instance_id):
        return None
    host_dir = sim_state_dir / "hosts" / instance_id
    try:
        spec = json.loads((host_dir / "boot.json").read_text())
        with open(host_dir / "boot.log", "rb") as fh:
            if latest:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - CONSOLE_LIMIT))
            raw = fh.read(CONSOLE_LIMIT)
    except (OSError, ValueError):
        return None
    if not isinstance(spec, dict) or spec.get("instance_id") != instance_id:
        return None
    return ConsoleOutput(instance_id, str(spec.get("address", "")), raw.decode("utf-8", errors="replace"))
