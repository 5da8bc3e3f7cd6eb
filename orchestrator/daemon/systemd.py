"""systemd notification (``sd_notify``): readiness, status, reload, stopping and the watchdog.

The protocol itself, not a library: one datagram of ``KEY=VALUE`` lines to the ``AF_UNIX``
socket named by ``$NOTIFY_SOCKET`` (a leading ``@`` is Linux's abstract namespace: the name
starts with a NUL byte). It is documented as stable (sd_notify(3)) and fits in this module;
docs/dependencies.md says why neither ``sdnotify`` nor ``systemd-python`` is used.

Without ``$NOTIFY_SOCKET`` (not started by systemd, or ``Type=`` other than ``notify``) every
call does nothing. A failed send is logged once and never stops the daemon: systemd's own
timeouts (``TimeoutStartSec``, ``WatchdogSec``) are what notices a daemon that cannot say it
is alive.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)


class Notifier:
    """Sends notifications to the service manager named by the environment (``NOTIFY_SOCKET``)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self._address = _socket_address(env.get("NOTIFY_SOCKET", ""))
        # Warn once: a daemon whose notifications fail would otherwise log at every watchdog ping.
        self._warned = False

    @property
    def enabled(self) -> bool:
        """Whether a service manager listens (``$NOTIFY_SOCKET`` set to a Unix socket)."""
        return self._address is not None

    def notify(self, **fields: str) -> bool:
        """Send one datagram ``KEY=value`` per field (keys upper-cased); True when it was sent."""
        if self._address is None:
            return False
        # A value is one line of the datagram: a newline in a status text would start a new key.
        payload = "\n".join(f"{key.upper()}={' '.join(str(v).splitlines())}" for key, v in fields.items())
        try:
            # Non-blocking: a service manager that stopped reading (its queue holds only a few
            # datagrams) must not stop the loop; the notification is dropped and logged once.
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK) as sock:
                sock.sendto(payload.encode("utf-8"), self._address)
            return True
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("systemd notification to %r failed: %s (further failures not logged)", self._address, exc)
            return False

    def ready(self, status: str) -> bool:
        """Startup finished (``READY=1``) with a status line for ``systemctl status``."""
        return self.notify(ready="1", status=status)

    def status(self, text: str) -> bool:
        """Update the status line."""
        return self.notify(status=text)

    def reloading(self) -> bool:
        """A reload started (``RELOADING=1``; systemd wants the monotonic time with it)."""
        return self.notify(reloading="1", monotonic_usec=str(time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000))

    def stopping(self, status: str) -> bool:
        """Shutdown started (``STOPPING=1``)."""
        return self.notify(stopping="1", status=status)

    def extend_timeout(self, seconds: float) -> bool:
        """Ask for ``seconds`` more before the start (or stop) times out (``EXTEND_TIMEOUT_USEC``)."""
        return self.notify(extend_timeout_usec=str(int(seconds * 1_000_000)))

    def watchdog(self) -> bool:
        """Tell the watchdog the daemon is alive (``WATCHDOG=1``)."""
        return self.notify(watchdog="1")


def take_from_environment() -> tuple[Notifier, float | None]:
    """The notifier and watchdog interval for this process, removing their variables from ``os.environ``.

    Terraform, Ansible and ssh children inherit the environment; without the variables none of
    them can speak for the daemon (``NotifyAccess=main`` refuses them too).
    """
    notifier, interval = Notifier(), watchdog_interval()
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        os.environ.pop(name, None)
    return notifier, interval


def _socket_address(value: str) -> str | bytes | None:
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    if value.startswith("/"):
        return value
    return None  # unset, or a transport this daemon does not speak (vsock:...)


MAX_WATCHDOG_PING = 3600.0


def watchdog_interval(environ: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Seconds between ``WATCHDOG=1`` pings: half of ``$WATCHDOG_USEC``; None when no watchdog is asked for.

    ``$WATCHDOG_PID``, when set, names the process the watchdog is for: any other process (a
    child that inherited the environment) must not ping.
    """
    env = os.environ if environ is None else environ
    usec, owner = env.get("WATCHDOG_USEC", ""), env.get("WATCHDOG_PID", "")
    # ASCII digits of at most a 64-bit number (what systemd writes); anything else is no watchdog
    # request, and converting thousands of digits would fail.
    if not (usec.isascii() and usec.isdigit() and len(usec) <= 20) or int(usec) == 0:
        return None
    if owner and owner != str(os.getpid() if pid is None else pid):
        return None
    # At most an hour between pings: a longer wait than threads can sleep would fail the pinger,
    # and pinging a watchdog of years every hour costs nothing.
    return min(int(usec) / 2 / 1_000_000, MAX_WATCHDOG_PING)


class Heartbeat:
    """The loop's proof of life for the watchdog: healthy while the last beat is at most ``max_age`` old.

    The loop beats at the end of every pass; ``max_age`` is the longest a healthy loop can go
    without one (its interval plus its longest pass). ``clock`` is monotonic seconds, injected
    so that tests control time.
    """

    def __init__(self, max_age: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._max_age = max_age
        self._clock = clock
        self._last = clock()

    def beat(self) -> None:
        """The loop made progress now."""
        self._last = self._clock()

    def healthy(self) -> bool:
        """Whether the last beat is recent enough (the ``healthy`` of ``WatchdogPinger``)."""
        return self._clock() - self._last <= self._max_age


class WatchdogPinger:
    """A thread that pings the watchdog every ``interval`` while ``healthy()`` says the daemon works.

    A thread alone would keep pinging for a daemon whose loop is stuck; ``healthy`` is how the
    loop proves it is alive (e.g. its last pass is recent). When it says no, the ping is
    skipped, and systemd restarts the daemon once ``WatchdogSec`` passes without one.
    """

    def __init__(self, notifier: Notifier, interval: float, healthy: Callable[[], bool] = lambda: True) -> None:
        self._notifier = notifier
        self._interval = interval
        self._healthy = healthy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="systemd-watchdog", daemon=True)
        self._skipping = False

    def ping_once(self) -> bool:
        """One ping if healthy; True when ``WATCHDOG=1`` was sent."""
        if not self._healthy():
            if not self._skipping:
                log.warning("watchdog ping withheld: the daemon reports itself unhealthy")
            self._skipping = True
            return False
        self._skipping = False
        return self._notifier.watchdog()

    def start(self) -> None:
        """Start pinging (first ping at once)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop pinging and wait for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.ping_once()
            self._stop.wait(self._interval)
