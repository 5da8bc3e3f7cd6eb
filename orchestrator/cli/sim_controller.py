"""``xceprov sim controller|failover|submit``: run and drive the simulated controller.

The running controller is reached through its admin channel, the Unix socket
``<sim_state_dir>/controller.sock`` (docs/protocol.md §9).
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.errors import ControllerError, UsageError, XceprovError
from orchestrator.model.durations import parse_duration
from orchestrator.sim.controller import admin
from orchestrator.sim.controller.server import parse_address

READY_TIMEOUT = 15.0


def _state_dir(ctx: CliContext) -> Path:
    return ctx.config().config.sim_state_dir().resolve()


def _bindable(host: str) -> bool:
    """Whether ``host`` is an address of this machine (so the controller can listen on it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, 0))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                return False
            raise
    return True


def _default_listen(ctx: CliContext) -> list[str]:
    cfg = ctx.config().config.controller
    out = list(cfg.addresses)
    # Worker addresses (the lab gateway) exist only once the simulated lab is up.
    out += [a for a in cfg.worker_addresses if a not in out and _bindable(parse_address(a)[0])]
    return out


def _serve_argv(state_dir: Path, listen: list[str], ttl: float) -> list[str]:
    argv = [sys.executable, "-m", "orchestrator.sim.controller", "serve", "--state-dir", str(state_dir)]
    for addr in listen:
        argv += ["--listen", addr]
    return [*argv, "--ttl", f"{ttl:g}"]


def _running(state_dir: Path) -> dict[str, object] | None:
    try:
        return admin.status(state_dir, timeout=2.0)
    except ControllerError:
        return None


@click.command("controller")
@click.option("--foreground", is_flag=True, help="Run in this process until interrupted.")
@click.option("--listen", multiple=True, metavar="HOST:PORT", help="Listen address (repeatable).")
@click.option("--ttl", default="15s", show_default=True, help="Lease TTL.")
@pass_ctx
def controller(ctx: CliContext, foreground: bool, listen: tuple[str, ...], ttl: str) -> None:
    """Start the simulated controller (in the background unless --foreground)."""
    state_dir = _state_dir(ctx)
    try:
        ttl_s = parse_duration(ttl)
        addrs = list(listen) or _default_listen(ctx)
        for a in addrs:
            parse_address(a)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    current = _running(state_dir)
    if current is not None:
        click.echo(f"simulated controller already running: term {current['term']}, {current['primary']}")
        return
    argv = _serve_argv(state_dir, addrs, ttl_s)
    if foreground:
        from orchestrator.sim.controller.__main__ import main as serve_main

        sys.exit(serve_main(argv[3:]))
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir / "controller.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True
        )
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise XceprovError(f"simulated controller exited during start: {tail[0]} (log: {log_path})")
        st = _running(state_dir)
        if st is not None:
            where = ", ".join(addrs)
            click.echo(f"simulated controller started: pid {proc.pid}, term {st['term']}, listening on {where}")
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, 15)
    raise XceprovError(f"simulated controller not ready after {READY_TIMEOUT:g}s (log: {log_path})")


@click.command("failover")
@pass_ctx
def failover(ctx: CliContext) -> None:
    """Simulate a controller failover: bump the term, drop every connection."""
    click.echo(admin.failover(_state_dir(ctx)).message)


@click.command("submit")
@click.option("--template", "-t", required=True, help="Host template the work needs.")
@click.option("--hosts", "-n", type=click.IntRange(min=1), required=True, help="Hosts the work needs.")
@click.option("--duration", "-d", default="60s", show_default=True, help="How long the work runs.")
@pass_ctx
def submit(ctx: CliContext, template: str, hosts: int, duration: str) -> None:
    """Add pending work to the simulated controller's workload."""
    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    click.echo(admin.submit(_state_dir(ctx), template, hosts, seconds).message)


def register(group: click.Group) -> None:
    """Add these commands to ``xceprov sim``."""
    for cmd in (controller, failover, submit):
        group.add_command(cmd)
