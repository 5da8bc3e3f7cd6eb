"""Run the ``xceprov`` command line as a user would: a child process in a site directory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.configfile import ENV_VAR
from orchestrator.ops.standalone import STANDALONE_GRACE, STANDALONE_TTL


def xceprov(site: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``xceprov ARGS`` with ``site/xceprov.yaml`` as the configuration, run in ``site``."""
    return _run(site, {**os.environ, ENV_VAR: str(site / "xceprov.yaml")}, args, timeout)


def xceprov_builtin(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``xceprov ARGS`` in ``cwd`` with no configuration given: the built-in one (a newcomer's first run)."""
    return _run(cwd, {k: v for k, v in os.environ.items() if k != ENV_VAR}, args, timeout)


def resume_when_admitted(site: Path) -> subprocess.CompletedProcess[str]:
    """``ops resume``, again while another command's standalone lease holds it off (exit 9): a
    command that ended without releasing its lease row (the database was away) holds the
    provider until the row expires and its grace passes."""
    deadline = time.monotonic() + STANDALONE_TTL + STANDALONE_GRACE + 90
    while True:
        done = xceprov(site, "ops", "resume")
        if done.returncode != 9 or time.monotonic() > deadline:
            return done
        time.sleep(1)


def _run(cwd: Path, env: dict[str, str], args: tuple[str, ...], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
