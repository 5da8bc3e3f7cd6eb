"""Local Python providers started once per Terraform command and *attached*, not launched.

Terraform starts a provider's plugin process afresh for every walk of one command: a plan
starts it three times (schemas, validate, plan), an apply twice. A Go provider starts in a few
milliseconds; a Python provider (the simulated cloud's ``xcesim``) needs about 0.4 s to import
its framework and answer the handshake, so a one-instance plan spent 1.5 of its 1.7 s starting
the provider (``bench/bench_daemon.py``, docs/performance.md).

Terraform's documented provider debugging mechanism, ``TF_REATTACH_PROVIDERS``, lets a
command use a provider process that is already running instead. Before the bundled engine
starts its worker for a command that needs providers, it starts each local provider that the
working directory uses once, in the provider's ``--dev`` mode (gRPC on a Unix socket inside a
private temporary directory: the ``tf`` framework's dev mode), reads the address it prints, and
starts the worker with that address in its environment. It must be there at the start: Go
reads a process's environment once, when the runtime starts, so the worker could not add it
later. Terraform then speaks the same plugin protocol to the same provider code, started once
instead of once per walk, and never ends an attached provider itself.

The provider serves only this command: its standard input is a pipe whose only write end is
handed to the worker (the engine closes its own copy), and it exits when that pipe ends. So it
lives exactly as long as the worker, also when the orchestrator dies: the worker then goes on
until Terraform has written its state (``_worker``), and its provider with it.

Only providers of :class:`~.mirror.LocalProvider` (Python modules this project installs into
its own mirror) are attached; a site's mirrored Go providers are launched by Terraform as
usual. A provider that cannot be attached (it does not start, or prints no address in time) is
left to Terraform to launch: the command then runs as it would have without this module, only
slower, and the reason is logged.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from orchestrator import durable
from orchestrator.clients.terraform.mirror import LocalProvider

# Terraform's own variable: provider source -> address of a running provider process.
REATTACH_ENV: Final = "TF_REATTACH_PROVIDERS"
# The descriptors (write ends of the providers' input pipes) the worker holds while it runs.
HOLD_FDS_ENV: Final = "XCEPROV_HOLD_FDS"
# go-plugin's handshake cookie for Terraform providers: a plugin refuses to serve without it.
MAGIC_COOKIE_KEY: Final = "TF_PLUGIN_MAGIC_COOKIE"
MAGIC_COOKIE: Final = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2"
# The Terraform commands that start providers. ``init`` must not see an attached provider (it
# would skip installing it and leave it out of the lock file); ``output`` and the rest read
# only the state or the configuration, so a provider started for them would be wasted.
COMMANDS: Final = frozenset({"plan", "apply", "show", "import", "refresh", "validate", "destroy", "console"})
LOCK_FILE: Final = ".terraform.lock.hcl"
# Where ``init`` installs (links) a working directory's providers.
PROVIDERS_DIR: Final = Path(".terraform/providers")
# Bounds on waiting: the address normally comes within half a second of the start.
START_TIMEOUT: Final = 60.0
STOP_TIMEOUT: Final = 10.0
_MAX_LINES: Final = 50
_MAX_LINE: Final = 64 * 1024
# The providers' scratch directories, in the system's temporary directory (a socket's path must
# stay short).
SCRATCH_PREFIX: Final = "xceprov-provider-"

log = logging.getLogger(__name__)


class AttachError(Exception):
    """The provider could not be attached (the command falls back to Terraform launching it)."""


def wanted(argv: Sequence[str], workdir: Path, specs: Sequence[LocalProvider]) -> list[LocalProvider]:
    """The providers worth attaching for ``terraform ARGV`` in ``workdir``.

    Only for a command that starts providers, and only those the working directory's lock file
    names: an initialised directory that uses the provider. A directory not initialised yet (no
    lock file) gets none, so ``init`` itself always installs and locks them.
    """
    command = next((a for a in argv if not a.startswith("-")), "")
    if command not in COMMANDS or not specs:
        return []
    try:
        lock = (workdir / LOCK_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [s for s in specs if f'provider "{s.source}"' in lock]


class AttachedProvider:
    """One running provider process in ``--dev`` mode and the address Terraform reattaches to."""

    def __init__(
        self, spec: LocalProvider, proc: subprocess.Popen[bytes], reattach: dict[str, Any], scratch: durable.OwnedDir
    ) -> None:
        self.spec = spec
        self.proc = proc
        self.reattach = reattach
        self._scratch = scratch

    @property
    def scratch(self) -> Path:
        """The provider's private temporary directory (its socket is inside)."""
        return self._scratch.path

    @classmethod
    def start(
        cls, spec: LocalProvider, workdir: Path, env: Mapping[str, str], timeout: float = START_TIMEOUT
    ) -> AttachedProvider:
        """Start the provider ``--dev`` in ``workdir`` and read its address; raises AttachError.

        The very executable Terraform would launch (the mirror's launcher that ``init`` linked
        into ``.terraform/providers``, which finds the interpreter and the import path), in
        Terraform's working directory as Terraform starts it: relative paths of the provider's
        configuration (a store file) mean the same either way.
        """
        executable = workdir / PROVIDERS_DIR / spec.executable_relpath()
        # Unbuffered: the address is printed once, to a pipe, and must arrive at once.
        child_env = {**env, MAGIC_COOKIE_KEY: MAGIC_COOKIE, "PYTHONUNBUFFERED": "1"}
        child_env.pop(REATTACH_ENV, None)
        # Its log goes where a launched provider's goes: nowhere unless Terraform logs.
        log_to = None if child_env.get("TF_LOG") else subprocess.DEVNULL
        # Its socket's directory inside one of ours, removed when it ends: a provider that exits
        # at end-of-input does not clean up after itself, and one temporary directory per
        # Terraform command would pile up. The provider holds the directory's lock too, so it
        # stays while either process runs and goes at the next attach once both are gone
        # (``remove_stale_scratch``), also after a ``kill -9`` of the orchestrator.
        scratch = durable.OwnedDir(Path(tempfile.gettempdir()), SCRATCH_PREFIX)
        child_env["TMPDIR"] = str(scratch.path)
        try:
            proc = subprocess.Popen(
                [str(executable), "--dev"],
                cwd=workdir,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_to,
                env=child_env,
                pass_fds=(scratch.lock_fd,),
                # Signals meant for the orchestrator or the worker are not the provider's.
                start_new_session=True,
            )
        except OSError as exc:
            scratch.close()
            raise AttachError(f"{spec.source}: cannot start {spec.module}: {exc}") from None
        provider = cls(spec, proc, {}, scratch)
        try:
            provider.reattach = read_address(proc, spec, timeout)
        except BaseException:
            provider.close()
            raise
        return provider

    def close(self) -> None:
        """End the provider: its input ends (it exits), then it is killed if it lingers; its
        scratch directory (with the socket) goes with it."""
        stop(self.proc)
        self._scratch.close()


def remove_stale_scratch() -> list[Path]:
    """Remove the scratch directories of providers whose orchestrator and provider are both gone."""
    return durable.remove_stale(Path(tempfile.gettempdir()), SCRATCH_PREFIX)


def read_address(proc: subprocess.Popen[bytes], spec: LocalProvider, timeout: float) -> dict[str, Any]:
    """The reattach entry the provider prints (``export TF_REATTACH_PROVIDERS='{...}'``), checked.

    The printed JSON must name this provider's source with a Unix socket address; anything
    else is refused rather than handed to Terraform.
    """
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in _lines(proc.stdout, deadline, timeout, spec):
        marker = f"{REATTACH_ENV}="
        if marker not in line:
            continue
        text = line.split(marker, 1)[1].strip().strip("'")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AttachError(f"{spec.source}: unreadable address from {spec.module}: {exc}") from None
        entry = doc.get(spec.source) if isinstance(doc, dict) else None
        addr = entry.get("Addr") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or not isinstance(addr, dict) or addr.get("Network") != "unix":
            raise AttachError(f"{spec.source}: {spec.module} printed no Unix socket address for {spec.source}")
        if not isinstance(addr.get("String"), str):
            raise AttachError(f"{spec.source}: {spec.module} printed no Unix socket address for {spec.source}")
        return dict(entry)
    raise AttachError(f"{spec.source}: {spec.module} exited or printed no address (exit code {proc.poll()})")


def _lines(pipe: IO[bytes], deadline: float, timeout: float, spec: LocalProvider) -> Iterator[str]:
    """Lines of ``pipe`` until end-of-file, at most :data:`_MAX_LINES`, each before ``deadline``."""
    buffer = b""
    count = 0
    fd = pipe.fileno()
    while count < _MAX_LINES:
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AttachError(f"{spec.source}: {spec.module} printed no address within {timeout:g} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                if buffer:
                    yield buffer.decode("utf-8", "replace")
                return
            buffer += chunk
            if len(buffer) > _MAX_LINE:
                raise AttachError(f"{spec.source}: {spec.module} printed a line of more than {_MAX_LINE} bytes")
        line, buffer = buffer.split(b"\n", 1)
        count += 1
        yield line.decode("utf-8", "replace")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Close the provider's input (it exits at end-of-file), wait, then kill what lingers."""
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    try:
        proc.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class Attachment:
    """What the worker of one command needs: variables for its environment, descriptors to keep."""

    env: dict[str, str]
    fds: tuple[int, ...]
    providers: list[AttachedProvider]

    def handed_over(self) -> None:
        """The worker started with its copies: close ours, so its exit alone ends the providers."""
        for provider in self.providers:
            if provider.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    provider.proc.stdin.close()


@contextlib.contextmanager
def attached(
    args: Sequence[str], workdir: Path, specs: Sequence[LocalProvider], env: Mapping[str, str]
) -> Iterator[Attachment]:
    """The providers attached for ``terraform ARGS`` in ``workdir``, ended when the block is left.

    None when none is wanted or none could be started (the reason is logged once per provider:
    Terraform then launches it as usual). On leaving, each provider is waited for (its input
    ends when the worker exits) and killed if it lingers.
    """
    started: list[AttachedProvider] = []
    chosen = wanted(args, workdir, specs)
    if chosen:
        remove_stale_scratch()
    try:
        for spec in chosen:
            try:
                started.append(AttachedProvider.start(spec, workdir, env))
            except AttachError as exc:
                log.warning("provider not attached, Terraform launches it: %s", exc)
        reattach = {p.spec.source: p.reattach for p in started}
        fds = tuple(p.proc.stdin.fileno() for p in started if p.proc.stdin is not None)
        extra = {REATTACH_ENV: json.dumps(reattach), HOLD_FDS_ENV: ",".join(map(str, fds))} if started else {}
        yield Attachment(extra, fds, started)
    finally:
        for provider in started:
            provider.close()


def keep_private(env: Mapping[str, str]) -> None:
    """In the worker: the descriptors it holds for its providers go to no process it starts."""
    for item in env.get(HOLD_FDS_ENV, "").split(","):
        if item.isdigit():
            with contextlib.suppress(OSError):
                os.set_inheritable(int(item), False)
