"""A daemon stand-in for the lifecycle tests: one op in flight, signals handled, exit status kept.

Usage: ``python lifecycle_child.py CONFIG park|stuck``. ``park``: the op stops when asked
(as an apply does on ``should_stop``); ``stuck``: the op never ends. Lines on stdout tell the
test what happened; the log goes to stderr.
"""

from __future__ import annotations

import sys
import threading
import time

from orchestrator.configfile import LoadedConfig, load_config
from orchestrator.daemon.lifecycle import Lifecycle, Stopping, exit_process
from orchestrator.daemon.logs import configure_logging
from orchestrator.daemon.systemd import take_from_environment


def in_force(loaded: LoadedConfig) -> str:
    """A restart-only key (the cluster) and a reloadable one (the stop bound) of ``loaded``."""
    return f"cluster={loaded.config.cluster} stop_timeout={loaded.config.daemon.stop_timeout:g}"


def main() -> None:
    path, mode = sys.argv[1], sys.argv[2]
    configure_logging("text", stream=sys.stderr)
    notifier, _interval = take_from_environment()
    lifecycle = Lifecycle(load_config(path), lambda: load_config(path), notifier)
    lifecycle.install_signal_handlers()
    lifecycle.on_reload(lambda new: print(f"reloaded {in_force(new)}", flush=True))
    lifecycle.on_stop("lease release", lambda: print("leases released", flush=True))

    started = threading.Event()

    def op() -> None:
        with lifecycle.in_flight("op-1"):
            started.set()
            while mode == "stuck" or not lifecycle.should_stop():
                time.sleep(0.05)
            print("op-1 parked", flush=True)  # inside: the shutdown waits for it

    threading.Thread(target=op, daemon=True).start()
    started.wait()
    lifecycle.started()
    notifier.ready("ready")
    print("ready", flush=True)
    while lifecycle.wait(30):
        print(in_force(lifecycle.config), flush=True)
    try:
        with lifecycle.in_flight("op-2"):
            print("op-2 started", flush=True)
    except Stopping:
        print("op-2 refused", flush=True)
    exit_process(lifecycle.shutdown())


if __name__ == "__main__":
    main()
