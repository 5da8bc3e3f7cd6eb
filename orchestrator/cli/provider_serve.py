"""``xceprov provider serve``: the provider contract as JSON lines on stdin and stdout (docs/provider-contract.md).

The command line owns the process's descriptors and signals. Answers go to a private copy of
stdout, and descriptor 1 then points at stderr: whatever else writes to stdout (a library, a
Terraform or Ansible child, which inherit the descriptor) lands in the log, never in the
middle of the answer stream. Requests are read from a private copy of stdin, and descriptor 0
then reads ``/dev/null``, so no child can swallow a request. SIGTERM and SIGINT stop the server
(``services.provider_serve``: no more input read, the requests in flight finish within
``--stop-timeout``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import BinaryIO

import click

from orchestrator.cli.context import CliContext, pass_ctx
from orchestrator.services.provider_serve import DEFAULT_MAX_LINE_BYTES, DEFAULT_WORKERS

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@click.command("serve")
@click.option(
    "--workers",
    metavar="N",
    type=click.IntRange(1, 64),
    default=DEFAULT_WORKERS,
    show_default=True,
    help="Requests run at once; while all are busy, no more input is read.",
)
@click.option(
    "--max-line-bytes",
    metavar="BYTES",
    type=click.IntRange(1024, 64 * 1024 * 1024),
    default=DEFAULT_MAX_LINE_BYTES,
    show_default=True,
    help="A longer request line is answered with an error (id null) and skipped.",
)
@click.option(
    "--stop-timeout",
    metavar="DURATION",
    default="60s",
    show_default=True,
    help="After SIGTERM, how long the requests in flight may take to finish.",
)
@click.option(
    "--no-bootstrap",
    is_flag=True,
    help="New hosts are complete once created (images that join by themselves); no bootstrap play.",
)
@pass_ctx
def serve(ctx: CliContext, workers: int, max_line_bytes: int, stop_timeout: str, no_bootstrap: bool) -> None:
    """Answer {id, action, input} lines on stdin with {id, result} or {id, error} lines on stdout.

    Requests run concurrently; each answer carries its request's id and comes when its request
    ends. End of input: the requests in flight finish, exit 0. SIGTERM: no more input is read,
    the requests in flight get --stop-timeout, exit 0 (1 if some were abandoned).
    """
    from orchestrator.errors import UsageError, XceprovError
    from orchestrator.model.durations import parse_duration
    from orchestrator.services.contract.consumers import contract_config
    from orchestrator.services.provider_contract import ACTIONS, ProviderContract
    from orchestrator.services.provider_serve import ServeOptions, Server

    try:
        bound = parse_duration(stop_timeout)
    except ValueError as exc:
        raise UsageError(f"--stop-timeout {stop_timeout}: {exc}") from None
    options = ServeOptions(ACTIONS, workers=workers, max_line_bytes=max_line_bytes, stop_timeout=bound)
    loaded, consumer = contract_config(ctx.config_path, os.environ)  # as the one-shot form finds it
    contract = ProviderContract(loaded, bootstrap=not no_bootstrap, consumer=consumer)
    try:
        with private_stdio() as (source, answers):
            server = Server(contract, source, answers, options)
            with signals_stop(server.request_stop):
                result = server.run()
    finally:
        contract.close()
    if result.abandoned:
        ids = ", ".join(str(rid) for rid in result.abandoned)
        raise XceprovError(
            f"provider serve: stopped ({result.reason}) with {len(result.abandoned)} request(s) still running "
            f"after --stop-timeout {stop_timeout} (ids {ids}): answered as abandoned; they may still take effect",
            result.exit_code,
        )


@contextlib.contextmanager
def private_stdio() -> Iterator[tuple[int, BinaryIO]]:
    """``(request descriptor, answer file)``: copies of stdin and stdout; 0 and 1 then read
    ``/dev/null`` and write to stderr until the block ends."""
    sys.stdout.flush()
    saved_in, saved_out = os.dup(0), os.dup(1)
    source, answers = os.dup(0), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield source, answers
    finally:
        with contextlib.suppress(OSError):
            answers.close()
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in (saved_in, saved_out, source, null):
            os.close(fd)


@contextlib.contextmanager
def signals_stop(stop: Callable[[str], None]) -> Iterator[None]:
    """Within the block, SIGTERM and SIGINT call ``stop(signal name)`` from a thread.

    The signal's number reaches that thread through ``signal.set_wakeup_fd``: CPython's C-level
    handler writes it to the pipe in whichever thread the kernel delivered the signal to. A
    Python-level handler runs only in the main thread, and only once it runs bytecode again: a
    signal delivered to another thread (a worker, this watcher) while the main thread sat in
    ``select`` woke nothing, and the server kept reading past a SIGTERM. The Python-level
    handler does nothing; it is there so the signal does not end the process."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    os.set_blocking(write_fd, False)

    def watch() -> None:
        while data := os.read(read_fd, 64):
            for signum in data:
                if signum in STOP_SIGNALS:
                    stop(signal.Signals(signum).name)

    watcher = threading.Thread(target=watch, name="provider-serve-signals", daemon=True)
    watcher.start()
    previous_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    previous = {signum: signal.signal(signum, _noted) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
        signal.set_wakeup_fd(previous_wakeup)
        os.close(write_fd)  # the watcher reads the end of the pipe and ends
        watcher.join()
        os.close(read_fd)


def _noted(_signum: int, _frame: object) -> None:
    """The Python-level handler of a stop signal: the wakeup descriptor already carried it."""
