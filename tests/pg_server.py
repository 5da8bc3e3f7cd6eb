"""A private throw-away PostgreSQL server for tests: initdb in a temporary directory, Unix socket only.

Tests of several orchestrators (docs/scale-out.md) need a real server. This one listens on no
TCP address at all (``listen_addresses=''``): only a Unix socket inside its own temporary
directory, so tests never touch a network or another server on the machine, and two test
files running at once each have their own. ``initdb`` refuses to run as root, so when root the
server runs as the ``postgres`` user the Debian package creates (``scripts/setup-env.sh``
installs the package when root); otherwise as the current user.

``PgServer.stop()``/``start()`` let a test take the database away for a while and bring it back
(same data, same socket). Everything is removed by ``close()``, also after a failure.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

DATABASE: Final = "xceprov"
# The database role tests connect as: the server's own superuser (the socket is private).
_BIN_GLOB: Final = "/usr/lib/postgresql/*/bin"


def server_bin() -> Path | None:
    """The newest PostgreSQL server binaries directory on this machine, None without one."""
    found = sorted(glob.glob(_BIN_GLOB), key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0)
    for candidate in reversed(found):
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    return None


def skip_reason() -> str | None:
    """Why a throw-away server cannot start here, None when it can."""
    if server_bin() is None:
        return "no PostgreSQL server binaries (Debian package postgresql; scripts/setup-env.sh installs it when root)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and no postgres user to run initdb as (initdb refuses root)"
    return None


class PgServer:
    """One throw-away server; ``conn_str`` is a libpq URI Terraform's pg backend and psycopg both take."""

    def __init__(self) -> None:
        bindir = server_bin()
        assert bindir is not None, skip_reason()
        self.bindir = bindir
        # Not under pytest's tmp_path: that is 0700 root's, and the server may run as postgres.
        self.root = Path(tempfile.mkdtemp(prefix="xceprov-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.log = self.root / "server.log"
        self.user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
        self.running = False
        self.socket_dir.mkdir()
        if os.geteuid() == 0:
            entry = pwd.getpwnam("postgres")
            for path in (self.root, self.socket_dir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._run(
            "initdb", "-D", str(self.data), "-U", self.user, "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"
        )
        self.start()
        self._run("createdb", "-h", str(self.socket_dir), "-U", self.user, DATABASE)

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.root, timeout=120, check=False)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr.strip()} {log}")

    @property
    def conn_str(self) -> str:
        """The URI of the test database over the private socket (no password: trust, socket only)."""
        return f"postgresql:///{DATABASE}?host={self.socket_dir}&user={self.user}&sslmode=disable"

    def start(self) -> None:
        """Start (or start again) the server on the same data and socket; waits until it accepts."""
        options = f"-c listen_addresses='' -k {self.socket_dir} -c fsync=off -c max_connections=200"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "60", "start")
        self.running = True

    def stop(self) -> None:
        """Stop the server at once (``-m fast``: open connections are cut, as in an outage)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")
        self.running = False

    def close(self) -> None:
        """Stop the server if it runs and remove everything it had."""
        if self.running:
            with contextlib.suppress(Exception):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "60", "stop")
            self.running = False
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def pg_server() -> Iterator[PgServer]:
    """A throw-away server for the block; the test is skipped with the reason when none can start."""
    reason = skip_reason()
    if reason is not None:
        pytest.skip(reason)
    server = PgServer()
    try:
        yield server
    finally:
        server.close()


def standalone_site(
    cluster: str,
    terraform: str = "{backend: pg}",
    *,
    max_instances: int = 20,
    shard_size: int | None = None,
    store: Path | None = None,
) -> str:
    """The ``xceprov.yaml`` the PostgreSQL integration tests write: a standalone site with one
    simulated provider ``sim`` and a ``cpu`` template, varied by its ``terraform`` block (flow
    YAML) and the provider's keys."""
    provider = [f"    max_instances: {max_instances}"]
    if shard_size is not None:
        provider.append(f"    shard_size: {shard_size}")
    if store is not None:
        provider.append(f"    settings: {{store: {store}}}")
    lines = [
        f"cluster: {cluster}",
        "state_dir: state",
        "standalone: true",
        "controller: {ca: system}",
        f"terraform: {terraform}",
        "providers:",
        "  sim:",
        "    module: xcesim",
        *provider,
        "templates:",
        "  cpu:",
        "    providers:",
        "      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}",
    ]
    return "\n".join(lines) + "\n"
