"""One Terraform command as a child process: its environment, its session, its graceful stop.

:class:`TerraformProcess` runs ``terraform ARGS`` in a working directory with a per-call
environment (CLI configuration, plugin cache, ``TF_IN_AUTOMATION``), waits for it without
holding the GIL, and interrupts it once, gracefully, on a timeout or a caller's stop request.
The command lines and their parsing are in :mod:`.commands`, the two engines in :mod:`.engine`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from filelock import Timeout

from orchestrator.clients.terraform._worker import PARENT_FD_ENV
from orchestrator.clients.terraform.attach import Attachment
from orchestrator.clients.terraform.backend import BackendProbe, store_unavailable
from orchestrator.clients.terraform.mirror import cache_lock, launcher_env
from orchestrator.errors import TerraformError
from orchestrator.model.redaction import hide_output

# The engine's logger, as before these commands had a module of their own (log filters keep working).
log = logging.getLogger("orchestrator.clients.terraform.engine")

# Inherited TF_* variables are dropped (TF_CLI_ARGS would break -json parsing, a stray
# TF_CLI_CONFIG_FILE would bypass the mirror); only logging switches pass through.
_KEPT_TF_VARS = frozenset({"TF_LOG", "TF_LOG_PATH", "TF_LOG_CORE", "TF_LOG_PROVIDER"})

# The summary of Terraform's diagnostic when a working directory's installed providers (its
# .terraform/providers links into the plugin cache) do not match its dependency lock file: the
# same in -json diagnostics and in plain output (whose detail text is wrapped, this line is not).
PROVIDERS_NOT_INSTALLED = "Required plugins are not installed"

# The umask of every Terraform process: Terraform (and the providers it starts) create their
# files with the process umask, and what it writes in a working directory holds settings and
# user data: its state, the state's backup, errored.tfstate after a backend write failed, the
# backend record .terraform/terraform.tfstate, saved plans. 0600 files and 0700 directories
# whatever the umask of the orchestrator (docs/security.md).
PRIVATE_UMASK = 0o077


@dataclass(frozen=True)
class Completed:
    """Exit code and output of one Terraform command."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    # True when the caller's ``should_stop`` asked for the graceful interrupt.
    interrupted: bool = False


class TerraformProcess:
    """How one Terraform command runs, shared by both engines; subclasses name the executable."""

    name = "terraform"
    # Whether the child is our worker, which stops gracefully when this process dies (_worker).
    watch_parent = False

    def __init__(
        self,
        *,
        cli_config: Path | None = None,
        plugin_cache_dir: Path | None = None,
        parallelism: int = 10,
        lock_timeout: float = 60.0,
        timeout: float | None = None,
        stop_grace: float = 120.0,
        env: Mapping[str, str] | None = None,
        poll_interval: float = 0.2,
        secrets: Sequence[str] = (),
        backend_probe: BackendProbe | None = None,
    ) -> None:
        """Configure an engine.

        ``cli_config`` is the CLI configuration file (from :func:`.mirror.ensure_mirror`);
        ``plugin_cache_dir`` the shared plugin cache, locked during ``init`` (and while a command
        whose providers went missing from it runs again, see :meth:`run`). ``timeout``
        bounds one command; on timeout, interruption or a caller's stop request Terraform gets
        one SIGINT (a graceful stop that writes state) and ``stop_grace`` seconds before it is
        killed. ``poll_interval`` is how often a caller's ``should_stop`` is asked. ``env`` is added
        to every command's environment (the pg backend's ``PG_CONN_STR``: never a command-line
        argument); every one of ``secrets`` found in a command's output is replaced by ``***``
        before anything reads it, so no error, log or progress line can carry it.
        ``backend_probe`` (a remote state backend): asked after a command failed whether the
        backend answers; when it does not, the failure is ``StoreUnavailable`` (:mod:`.backend`).
        """
        # Absolute: Terraform runs in the working directory, not in ours.
        self.cli_config = cli_config.resolve() if cli_config is not None else None
        self.plugin_cache_dir = plugin_cache_dir.resolve() if plugin_cache_dir is not None else None
        self.parallelism = parallelism
        self.lock_timeout = lock_timeout
        self.timeout = timeout
        self.stop_grace = stop_grace
        self.extra_env = dict(env or {})
        self.poll_interval = poll_interval
        # Longest first: a password inside the whole connection string goes with the string.
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)
        self.backend_probe = backend_probe

    # --- how to run -----------------------------------------------------------------

    def command(self) -> list[str]:
        """The argv prefix that runs Terraform (``[exe]``)."""
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The environment of one Terraform command (built per call, never ``os.environ``)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TF_") or k in _KEPT_TF_VARS}
        env.update(
            TF_IN_AUTOMATION="1",
            TF_INPUT="0",
            CHECKPOINT_DISABLE="1",
            TF_CLI_CONFIG_FILE=str(self.cli_config) if self.cli_config else os.devnull,
        )
        if self.plugin_cache_dir is not None:
            env["TF_PLUGIN_CACHE_DIR"] = str(self.plugin_cache_dir)
        env.update(launcher_env())
        env.update(self.extra_env)
        return env

    def attachment(
        self, workdir: Path, args: Sequence[str], env: Mapping[str, str]
    ) -> AbstractContextManager[Attachment]:
        """Providers started before the command and attached to it: none (Terraform launches them)."""
        return contextlib.nullcontext(Attachment({}, (), []))

    def run(
        self,
        workdir: Path,
        args: Sequence[str],
        should_stop: Callable[[], bool] | None = None,
        on_line: Callable[[str], None] | None = None,
    ) -> Completed:
        """Run ``terraform ARGS`` in ``workdir`` and wait, without holding the GIL or any lock.

        With ``on_line``, each line of stdout is handed to it as Terraform writes it (the
        bundled engine's worker relays them line by line), from a reader thread.

        Terraform runs in its own session so that a terminal Ctrl-C reaches it only through
        us, exactly once: a second SIGINT would make Terraform abandon the state mid-write.
        With ``should_stop``, the wait wakes every ``poll_interval`` seconds to ask it; the
        first True sends the one SIGINT, after which Terraform has ``stop_grace`` seconds to
        finish its calls in flight and write its state (``Completed.interrupted``).

        With a plugin cache, a command other than ``init`` that failed because its providers
        were missing from the cache (another working directory's ``init`` was rewriting it)
        runs once more, under the cache lock.
        """
        done = self._run_once(workdir, args, should_stop, on_line)
        if self.plugin_cache_dir is None or not self._cache_was_rewritten(args, done):
            return done
        # The plugin cache is shared, and Terraform rewrites a provider's cache entry (removes
        # it, then copies it again) on every init of a working directory whose lock file does
        # not list it yet; only init takes the cache lock. Any other command of another working
        # directory that starts meanwhile finds its provider missing or partial through its
        # .terraform/providers link and fails at once, before any operation: running it again
        # once that init is done is safe. A second failure is the command's own.
        log.warning(
            "%s %s in %s: its providers were missing from the plugin cache; waiting for another "
            "init to finish writing the cache, then running it once more",
            self.name,
            args[0],
            workdir,
        )
        try:
            with cache_lock(self.plugin_cache_dir):
                # Afresh, providers attached again: the first run's attachment ended with it.
                return self._run_once(workdir, args, should_stop, on_line)
        except Timeout:
            log.warning("%s %s in %s: the plugin cache stayed locked; not run again", self.name, args[0], workdir)
            return done

    @staticmethod
    def _cache_was_rewritten(args: Sequence[str], done: Completed) -> bool:
        """Whether ``done`` (not an init) failed on providers missing from the plugin cache."""
        if not args or args[0] == "init" or done.returncode == 0 or done.interrupted:
            return False
        return PROVIDERS_NOT_INSTALLED in done.stdout or PROVIDERS_NOT_INSTALLED in done.stderr

    def _run_once(
        self,
        workdir: Path,
        args: Sequence[str],
        should_stop: Callable[[], bool] | None,
        on_line: Callable[[str], None] | None,
    ) -> Completed:
        """One run of :meth:`run`: environment, attachment, process."""
        argv = (*self.command(), *args)
        if not Path(workdir).is_dir():
            raise TerraformError(f"{self.name} {args[0]}: working directory {workdir} does not exist")
        started = time.monotonic()
        env = self.environment()
        reader = on_line
        if on_line is not None and self.secrets:

            def reader(line: str) -> None:
                on_line(self.hidden(line))

        with self.attachment(workdir, args, env) as attachment:
            env.update(attachment.env)
            done = self._run(workdir, argv, args, env, started, attachment, should_stop, reader)
        if self.secrets:
            done = dataclasses.replace(done, stdout=self.hidden(done.stdout), stderr=self.hidden(done.stderr))
        # Terraform's error exit is 1 (2 is a plan's "changes present", 3 fmt's "not formatted").
        if done.returncode == 1 and not done.interrupted:
            away = store_unavailable(self.name, args, Path(workdir), self.backend_probe)
            if away is not None:
                raise away
        return done

    def hidden(self, text: str) -> str:
        """``text`` with every secret of this engine replaced by ``***``: matched in the decoded
        JSON messages, quoted, escaped or percent-encoded (``model/redaction.py``)."""
        return hide_output(text, self.secrets)

    def _run(
        self,
        workdir: Path,
        argv: tuple[str, ...],
        args: Sequence[str],
        env: dict[str, str],
        started: float,
        attachment: Attachment,
        should_stop: Callable[[], bool] | None,
        on_line: Callable[[str], None] | None,
    ) -> Completed:
        """:meth:`run` once the command's providers are attached."""
        # The worker's end of the parent-death pipe (see _worker): we hold the write end until
        # Terraform has exited, so end-of-file there means this process is gone.
        watch_r, watch_w = os.pipe() if self.watch_parent else (-1, -1)
        if watch_r >= 0:
            env[PARENT_FD_ENV] = str(watch_r)
        try:
            proc = subprocess.Popen(
                argv,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                encoding="utf-8",
                errors="replace",
                start_new_session=True,
                umask=PRIVATE_UMASK,
                pass_fds=((watch_r,) if watch_r >= 0 else ()) + attachment.fds,
            )
        except BaseException:
            if watch_w >= 0:
                os.close(watch_w)
            raise
        finally:
            if watch_r >= 0:
                os.close(watch_r)
            attachment.handed_over()
        try:
            completed = self._completed(proc, argv, args, workdir, started, should_stop, on_line)
        finally:
            if watch_w >= 0:
                os.close(watch_w)
        return completed

    def _completed(
        self,
        proc: subprocess.Popen[str],
        argv: tuple[str, ...],
        args: Sequence[str],
        workdir: Path,
        started: float,
        should_stop: Callable[[], bool] | None,
        on_line: Callable[[str], None] | None = None,
    ) -> Completed:
        """Wait for ``proc`` (see :meth:`run`), stopping it gracefully on timeout or error."""
        # Set once the stop request sent the one SIGINT, so that a Ctrl-C during the grace that
        # follows does not send a second (Terraform's "abandon the state" interrupt).
        sent: list[bool] = []
        pipes: _Pipes = _LinePipes(proc, on_line) if on_line is not None else _Pipes(proc)
        try:
            stdout, stderr, interrupted = self._wait(pipes, started, should_stop, sent)
        except subprocess.TimeoutExpired:
            self._stop(pipes, interrupted=bool(sent))
            raise TerraformError(
                f"{self.name} {args[0]} in {workdir} did not finish within {self.timeout:g} s; stopped"
            ) from None
        except BaseException:
            self._stop(pipes, interrupted=bool(sent))
            raise
        seconds = time.monotonic() - started
        log.debug("%s %s in %s: exit %d after %.2f s", self.name, args[0], workdir, proc.returncode, seconds)
        return Completed(tuple(argv), proc.returncode, stdout, stderr, seconds, interrupted)

    def _wait(
        self,
        pipes: _Pipes,
        started: float,
        should_stop: Callable[[], bool] | None,
        sent: list[bool],
    ) -> tuple[str, str, bool]:
        """Wait for ``proc``; ask ``should_stop`` between waits and interrupt it once when told.

        Raises ``TimeoutExpired`` when the command's own ``timeout`` passes first.
        """
        proc = pipes.proc
        if should_stop is None:
            stdout, stderr = pipes.communicate(timeout=self.timeout)
            return stdout, stderr, False
        deadline = None if self.timeout is None else started + self.timeout
        while True:
            wait = self.poll_interval
            if deadline is not None:
                wait = min(wait, max(deadline - time.monotonic(), 0.0))
            try:
                # communicate() may be called again after a timeout without losing output.
                stdout, stderr = pipes.communicate(timeout=wait)
                return stdout, stderr, False
            except subprocess.TimeoutExpired:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
            if should_stop():
                break
        if proc.poll() is not None:
            # Terraform finished on its own meanwhile: nothing was cut short.
            stdout, stderr = pipes.communicate()
            return stdout, stderr, False
        log.info("%s: stop requested; interrupting Terraform once and waiting for it to write its state", self.name)
        proc.send_signal(signal.SIGINT)
        sent.append(True)
        try:
            stdout, stderr = pipes.communicate(timeout=self.stop_grace)
        except subprocess.TimeoutExpired:
            # Out of patience: kill what is left of the session (the state may be behind).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = pipes.communicate()
            raise TerraformError(
                f"{self.name} did not stop within {self.stop_grace:g} s of its interrupt; killed "
                "(its state may not list the objects it created last)"
            ) from None
        return stdout, stderr, True

    def _stop(self, pipes: _Pipes, interrupted: bool = False) -> None:
        proc = pipes.proc
        try:
            if proc.poll() is None:
                if not interrupted:
                    proc.send_signal(signal.SIGINT)
                pipes.communicate(timeout=self.stop_grace)
        except BaseException:
            # Out of patience (or interrupted again): Terraform is killed with the rest below.
            pass
        finally:
            # Whatever is left of Terraform's session (the process itself after the grace, or
            # a provisioner's grandchild that a halted Terraform did not reap) goes too.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            # An interrupted communicate() leaves the pipes open; nothing more is read from them.
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


class _Pipes:
    """A child's stdout and stderr, read to the end by ``Popen.communicate``."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the child and its output; ``TimeoutExpired`` keeps what was read (may be called again)."""
        return self.proc.communicate(timeout=timeout)


class _LinePipes(_Pipes):
    """Reads stdout line by line in a thread, handing each line to ``on_line`` as it comes; stderr too.

    ``communicate`` keeps ``Popen.communicate``'s contract (the whole output once the child ended
    and its pipes closed, ``TimeoutExpired`` otherwise, callable again).
    """

    def __init__(self, proc: subprocess.Popen[str], on_line: Callable[[str], None]) -> None:
        super().__init__(proc)
        self._out: list[str] = []
        self._err: list[str] = []
        self._threads = [
            threading.Thread(target=self._pump, args=(proc.stdout, self._out, on_line), daemon=True),
            threading.Thread(target=self._pump, args=(proc.stderr, self._err, None), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _pump(pipe: IO[str] | None, sink: list[str], on_line: Callable[[str], None] | None) -> None:
        if pipe is None:
            return
        with contextlib.suppress(OSError, ValueError):  # the pipe closed under us: the child is gone
            for line in pipe:
                sink.append(line)
                if on_line is not None:
                    try:
                        on_line(line)
                    except Exception:  # a progress display's bug must never break an apply
                        log.exception("progress callback failed on a Terraform message")

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """The whole stdout and stderr once the child ended and its pipes reached their end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.proc.wait(timeout=timeout)
        for thread in self._threads:
            thread.join(None if deadline is None else max(deadline - time.monotonic(), 0.0))
            if thread.is_alive():  # a grandchild still holds the pipe open
                raise subprocess.TimeoutExpired(self.proc.args, timeout or 0.0)
        for pipe in (self.proc.stdout, self.proc.stderr):  # read to their end: closed, as communicate() does
            if pipe is not None:
                pipe.close()
        return "".join(self._out), "".join(self._err)
