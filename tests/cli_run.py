"""Run the ``xceprov`` command line as a user would: a child process in a site directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def xceprov(site: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``xceprov ARGS`` with ``site/xceprov.yaml`` as the configuration, run in ``site``."""
    env = {**os.environ, "XCEPROV_CONFIG": str(site / "xceprov.yaml")}
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=site,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
