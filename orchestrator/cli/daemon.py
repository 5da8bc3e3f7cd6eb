"""``xceprov daemon``: the long-running process (docs/daemon.md); under systemd, ``contrib/systemd/xceprov.service``.

The command line builds what only it may: the bootstrap and decommission plays as the
executor's callables (``services.ops.playbook_callables``, with the simulated world's parts, which
``services`` uses only for providers of the simulated cloud). Everything else is
``orchestrator.daemon.service``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import click

from orchestrator.cli.context import CliContext, pass_ctx

if TYPE_CHECKING:  # the verb's imports stay inside it, so that --help loads nothing heavy
    from orchestrator.clients.controller.types import HostInfo
    from orchestrator.ops.executor import Created


@click.command("daemon")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default=None,
    help="Log lines on stderr as text or JSON (default: daemon.log_format).",
)
@pass_ctx
def daemon(ctx: CliContext, log_format: str | None) -> None:
    """Run the daemon: keep the leases, follow demand, burst, bootstrap, reclaim (until SIGTERM)."""
    from orchestrator.cli.bootstrap import simulated_world
    from orchestrator.configfile import load_config
    from orchestrator.daemon.guarded import play_stop
    from orchestrator.daemon.lifecycle import Lifecycle, exit_process
    from orchestrator.daemon.logs import configure_logging
    from orchestrator.daemon.service import Daemon, DaemonOptions
    from orchestrator.daemon.statelock import hold_state_dir
    from orchestrator.daemon.systemd import take_from_environment
    from orchestrator.paths import toolkit_root
    from orchestrator.services.bootstrap_sources import first_boot_results, notice_readers
    from orchestrator.services.join_tokens import remove_own_tokens, remove_stale_tokens
    from orchestrator.services.ops import playbook_callables

    loaded = ctx.config()
    # Before anything is read or removed under the state directory: a second daemon there is
    # refused (exit 9). Kept by this frame until the process exits (exit_process never returns).
    _state_lock = hold_state_dir(loaded.config.state_dir, os.getpid())
    fmt = log_format or loaded.config.daemon.log_format
    configure_logging("json" if fmt == "json" else "text", logging.DEBUG if ctx.verbose > 1 else logging.INFO)
    notifier, watchdog = take_from_environment()
    path = ctx.config_path
    lifecycle = Lifecycle(loaded, lambda: load_config(path), notifier)
    # Before anything is taken: a SIGTERM during the start is a stop like any other.
    lifecycle.install_signal_handlers()
    # Join tokens of a run that was killed or exited past stop_timeout go now; this run's own go
    # before its exit, also one that leaves work in flight (the stop steps run before it).
    remove_stale_tokens(loaded.config)
    lifecycle.on_stop("join tokens", remove_own_tokens)
    root, world = toolkit_root(), simulated_world()

    # The plays read the configuration in force when they run (a SIGHUP may have changed it);
    # a SIGTERM ends a running bootstrap play between two tasks.
    def boot(provider: str, created: Sequence[Created]) -> Mapping[str, str]:
        return playbook_callables(lifecycle.config, root, world, stop=play_stop(lifecycle))[0](provider, created)

    def decommission(provider: str, hosts: Sequence[HostInfo]) -> Mapping[str, str]:
        return playbook_callables(lifecycle.config, root, world)[1](provider, hosts)

    options = DaemonOptions(
        root,
        bootstrap=boot,
        decommission=decommission,
        # First-boot hosts' results from their consoles, by the configuration in force (a SIGHUP's).
        first_boot=first_boot_results(lambda: lifecycle.config.config, world),
        # Interruption notices of the providers' clouds (the simulated cloud's; docs/daemon.md).
        notices=notice_readers(world),
        notifier=notifier,
        watchdog_interval=watchdog,
    )
    code = Daemon(lifecycle, options).run()
    exit_process(code)
