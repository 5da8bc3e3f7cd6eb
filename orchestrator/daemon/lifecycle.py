"""Process life of the daemon: SIGTERM (stop within a bound), SIGHUP (reload), exit status.

- **SIGTERM** (and SIGINT, for a daemon run in a terminal): the stop flag goes up at once, so
  no new op starts (``in_flight`` refuses, ``should_stop`` tells running applies to park: one
  graceful Terraform interrupt, state written, the op resumable). Work already in flight gets
  ``daemon.stop_timeout`` from the signal to finish or park; then the stop callbacks run (lease
  release) and ``shutdown()`` returns 0, or ``EXIT_STOP_TIMEOUT`` naming what was still running
  (its intent facts make it resume at the next start).
- **SIGHUP**: the configuration is read again through ``orchestrator.configfile``. A valid one
  replaces the current one for the next pass (reload callbacks run), except for the keys that
  take effect at the next start (``restartonly.py``: the running value is kept, one log line per
  key); an invalid one is refused, the last good one stays, and the log says so in one line
  naming the file and the problems. A reload never ends the daemon: whatever fails (the file
  cannot be read, a callback cannot apply the new configuration) is logged and the previous
  configuration stays in force; ``READY=1`` follows ``RELOADING=1`` in every case, as
  sd_notify(3) requires (without it the unit stays ``reloading``).

Signal handlers only write the signal's number to a pipe (an ``os.write`` takes no Python lock,
so a handler cannot deadlock against the thread it interrupted); a watcher thread does the
rest, so a reload or the stop flag never waits for the loop to finish a long apply.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from typing import NoReturn

from orchestrator.configfile import LoadedConfig
from orchestrator.daemon.restartonly import keep_restart_only, log_lines
from orchestrator.daemon.systemd import Notifier
from orchestrator.daemon.timeouts import NamedTimeout
from orchestrator.errors import ConfigError

log = logging.getLogger(__name__)

EXIT_STOP_TIMEOUT = 1  # work was still in flight when daemon.stop_timeout passed
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

ConfigLoader = Callable[[], LoadedConfig]
RELOADED = "configuration reloaded from"  # the status line of a reload that is in force


class Stopping(Exception):
    """Raised by ``in_flight`` once a stop was asked for: no new op may start."""


class Lifecycle:
    """The stop flag, the in-flight work, the current configuration and their signals.

    ``reload`` reads the configuration again (usually ``lambda: load_config(path)``).
    """

    def __init__(
        self,
        loaded: LoadedConfig,
        reload: ConfigLoader,
        notifier: Notifier | None = None,
    ) -> None:
        self._loaded = loaded
        self._reload = reload
        self._notifier = notifier if notifier is not None else Notifier({})
        self._cond = threading.Condition()
        self._active: dict[str, int] = {}
        self._stop_at: float | None = None
        self._stop_bound = loaded.config.daemon.stop_timeout
        self._wake = threading.Event()
        self._on_reload: list[Callable[[LoadedConfig], None]] = []
        self._on_stop: list[tuple[str, Callable[[], None]]] = []
        self._on_sighup: list[Callable[[bool], None]] = []
        self._watcher: threading.Thread | None = None
        # READY=1 of the start sent: until then a reload says nothing of readiness (systemd
        # would take a READY=1 of a reload for the end of the start, before the first pass).
        self._started = False

    # -- what the loop reads ------------------------------------------------------------------

    @property
    def config(self) -> LoadedConfig:
        """The configuration in force: the last one that loaded without a problem."""
        with self._cond:
            return self._loaded

    @property
    def stopping(self) -> bool:
        """Whether a stop was asked for (no new op may start)."""
        with self._cond:
            return self._stop_at is not None

    def stop_window(self) -> tuple[float, float] | None:
        """``(asked at, bound)`` of the stop: ``time.monotonic()`` seconds and ``daemon.stop_timeout``
        as it was in force then; None while not stopping."""
        with self._cond:
            return None if self._stop_at is None else (self._stop_at, self._stop_bound)

    def wait_stopping(self, timeout: float | None = None) -> bool:
        """Block until a stop is asked for (True) or ``timeout`` passes (False)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._stop_at is not None, timeout)

    def should_stop(self) -> bool:
        """For ``Engine.apply(should_stop=...)``: True once the daemon is stopping."""
        return self.stopping

    @contextmanager
    def in_flight(self, name: str) -> Iterator[None]:
        """Hold ``name`` (an op id, a phase) as work the stop waits for; ``Stopping`` once stopping."""
        with self._cond:
            if self._stop_at is not None:
                raise Stopping(f"not starting {name}: the daemon is stopping")
            self._active[name] = self._active.get(name, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._active[name] -= 1
                if not self._active[name]:
                    del self._active[name]
                self._cond.notify_all()

    def wake(self) -> None:
        """End the current ``wait`` early (a demand push: the loop runs on every push, not only on its interval)."""
        self._wake.set()

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout``, or until a signal was handled or ``wake()`` called; False once stopping."""
        self._wake.wait(timeout)
        self._wake.clear()
        return not self.stopping

    def started(self) -> None:
        """The start is over (the caller sends its ``READY=1`` now): reloads notify from now on."""
        with self._cond:
            self._started = True

    def on_reload(self, callback: Callable[[LoadedConfig], None]) -> None:
        """Call ``callback`` with each configuration a SIGHUP loads successfully (restart-only keys
        already kept). A callback that raises refuses it: the callbacks that took it get the
        previous configuration again, and the previous one stays in force."""
        self._on_reload.append(callback)

    def on_sighup_done(self, callback: Callable[[bool], None]) -> None:
        """Call ``callback`` after each SIGHUP's reload with whether the new configuration is in force."""
        self._on_sighup.append(callback)

    def on_stop(self, name: str, callback: Callable[[], None]) -> None:
        """Run ``callback`` at shutdown after in-flight work (last registered first), e.g. lease release."""
        self._on_stop.append((name, callback))

    # -- signals ----------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """Handle SIGTERM, SIGINT and SIGHUP (main thread only, as Python requires)."""
        # The pipe stays open until the process exits: a handler may still fire during the
        # shutdown, and a closed (or reused) descriptor must never be written to.
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(write_fd, False)
        self._watcher = threading.Thread(target=self._watch, args=(read_fd,), name="daemon-signals", daemon=True)
        self._watcher.start()

        def handler(signum: int, _frame: object) -> None:
            # A full pipe holds signals not yet handled: one more adds nothing.
            with suppress(BlockingIOError):
                os.write(write_fd, bytes([signum]))

        for signum in (*STOP_SIGNALS, signal.SIGHUP):
            signal.signal(signum, handler)

    def _watch(self, read_fd: int) -> None:
        while True:  # until the process exits (a daemon thread)
            for signum in os.read(read_fd, 64):
                try:
                    if signum == signal.SIGHUP:
                        taken = self.reload()
                        for callback in self._on_sighup:
                            callback(taken)
                    else:
                        self.request_stop(signal.Signals(signum).name)
                except Exception:  # a bug here must not leave the daemon deaf to the next signal
                    log.exception("handling %s failed", signal.Signals(signum).name)

    # -- what the signals do ------------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """Raise the stop flag (what SIGTERM does); a second request changes nothing."""
        with self._cond:
            if self._stop_at is not None:
                log.info("%s: already stopping", reason)
                return
            self._stop_at = time.monotonic()
            bound = self._stop_bound = self._loaded.config.daemon.stop_timeout
            busy = sorted(self._active)
            self._cond.notify_all()
        log.info(
            "%s: stopping: no new op; in-flight work (%s) has %s %gs to finish or park",
            reason,
            ", ".join(busy) or "none",
            NamedTimeout.STOP_TIMEOUT.value,
            bound,
            extra={"timeout": NamedTimeout.STOP_TIMEOUT.value},
        )
        self._notifier.stopping(f"stopping: {len(busy)} in flight")
        self._wake.set()

    def reload(self) -> bool:
        """Read the configuration again (what SIGHUP does); True when the new one is in force.

        Never raises: ``READY=1`` (with a status line saying what happened) follows the
        ``RELOADING=1`` it sends whatever the outcome. Before :meth:`started`, only the status line.
        """
        with self._cond:
            started = self._started
        if started:
            self._notifier.reloading()
        status = "reload failed"
        try:
            status = self._reload_now()
            return status.startswith(RELOADED)
        except Exception as exc:  # a reload must never end the daemon (nor leave systemd waiting)
            log.exception("SIGHUP: configuration not reloaded, keeping the previous one: %s", error_line(exc))
            status = f"reload failed: {error_line(exc)}"
            return False
        finally:
            if started:
                self._notifier.ready(status)
            else:
                self._notifier.status(status)
            self._wake.set()

    def _reload_now(self) -> str:
        """Load, keep the restart-only keys, hand the result to the callbacks; the status line."""
        old = self.config
        try:
            fresh = self._reload()
        except ConfigError as exc:
            # Each problem already names its file ("<file>: <key>: <what>"): one line for all.
            log.error("SIGHUP: configuration not reloaded, keeping the last good one: %s", "; ".join(exc.problems))
            return f"reload refused: {exc.problems[0] if exc.problems else 'invalid configuration'}"
        effective, kept = keep_restart_only(old.config, fresh.config)
        new = replace(fresh, config=effective)
        applied: list[Callable[[LoadedConfig], None]] = []
        for callback in self._on_reload:
            try:
                callback(new)
            except Exception as exc:  # not applied: every part goes back to the previous configuration
                name = getattr(callback, "__qualname__", repr(callback))
                log.exception(
                    "SIGHUP: the configuration from %s could not be applied (%s: %s), keeping the previous one",
                    new.source,
                    name,
                    error_line(exc),
                )
                self._give_back(old, applied)
                return f"reload failed: {error_line(exc)}"
            applied.append(callback)
        with self._cond:
            self._loaded = new
        log.info("SIGHUP: configuration reloaded from %s", new.source)
        for line in log_lines(kept, fresh.config, new.source):
            log.warning("%s", line)
        return f"{RELOADED} {new.source}"

    @staticmethod
    def _give_back(old: LoadedConfig, applied: list[Callable[[LoadedConfig], None]]) -> None:
        for callback in reversed(applied):
            try:
                callback(old)
            except Exception:  # logged; the others still get the previous configuration back
                log.exception("SIGHUP: the previous configuration could not be given back to %s", callback)

    def restore(self, previous: LoadedConfig, failed: LoadedConfig) -> None:
        """``previous`` in force again when ``failed`` (put in force by a reload) could not be applied
        later (by the loop, between two passes); a newer reload since then is left alone."""
        with self._cond:
            if self._loaded is failed:
                self._loaded = previous

    # -- the end ----------------------------------------------------------------------------

    def shutdown(self) -> int:
        """After a stop: wait for in-flight work up to ``stop_timeout``, run the stop callbacks, give the exit code."""
        if not self.stopping:
            self.request_stop("shutdown")
        with self._cond:
            assert self._stop_at is not None
            deadline = self._stop_at + self._stop_bound
            bound = self._stop_bound
            while self._active and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            still = sorted(self._active)
        for name, callback in reversed(self._on_stop):
            try:
                callback()
            except Exception:  # one failed release must not keep the others from running
                log.exception("stop step %s failed", name)
        if still:
            log.error(
                "%s %gs passed with work in flight (%s): exiting anyway; it resumes at the next start",
                NamedTimeout.STOP_TIMEOUT.value,
                bound,
                ", ".join(still),
                extra={"timeout": NamedTimeout.STOP_TIMEOUT.value},
            )
            return EXIT_STOP_TIMEOUT
        log.info("stopped: no work in flight")
        return 0


def error_line(exc: BaseException) -> str:
    """The error's type and the first line of its text (for one log or status line)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def exit_process(code: int) -> NoReturn:
    """Exit now with ``code`` after flushing the logs, even if threads still run (work past the bound)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a closed stream has nothing left to flush
            stream.flush()
    os._exit(code)
