"""A daemon whose pass never ends, for the stop-bound test: ``python service_child.py CONFIG``.

The real service (leases through the keeper child, the link, the stop thread); only the
reconciler is a stand-in whose first pass ignores every stop, as a hung Terraform call would.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

from orchestrator.configfile import load_config
from orchestrator.daemon.lifecycle import Lifecycle, exit_process
from orchestrator.daemon.logs import configure_logging
from orchestrator.daemon.service import Daemon, DaemonOptions, LoopParts
from orchestrator.model.config import Config


class Stuck:
    def __init__(self, parts: LoopParts) -> None:
        self.parts = parts

    def run_once(self, trigger: str = "interval") -> Any:
        print(f"pass {trigger} started", flush=True)
        threading.Event().wait()  # never returns

    def reload(self, config: Config) -> None:
        """Nothing to reload."""


def main() -> None:
    path = sys.argv[1]
    configure_logging("text", stream=sys.stderr)
    lifecycle = Lifecycle(load_config(path), lambda: load_config(path))
    lifecycle.install_signal_handlers()
    options = DaemonOptions(Path(path).parent, engine=object(), reconciler=Stuck)  # type: ignore[arg-type]
    exit_process(Daemon(lifecycle, options).run())


if __name__ == "__main__":
    main()
