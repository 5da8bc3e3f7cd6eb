"""``xceprov daemon`` as contrib/systemd/xceprov.service runs it: no root, no capability.

systemd is not this test's service manager, so the test does what the unit asks of it by hand:
a private state directory owned by the user (``StateDirectory=``, named by ``$STATE_DIRECTORY``),
the secrets as 0400 copies the user owns (``LoadCredential=``, ``$CREDENTIALS_DIRECTORY``), and
the switch to the user with an empty capability bounding set and no new privileges
(``User=``, ``CapabilityBoundingSet=``, ``NoNewPrivileges=``), here with ``setpriv`` to
``nobody``. The configuration leaves ``state_dir`` out and names every key ``credential:NAME``,
as contrib/systemd/README.md tells a site to. The controller is the simulated one, run as root
as a site's controller runs elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim_world_helpers import SimWorld, sim_world, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged user needs root"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is not installed"),
]

ROOT = Path(__file__).resolve().parents[2]
USER = "nobody"
STOP_TIMEOUT = 30
# What the unit's LoadCredential= lines load, by the simulated world's file each one stands for.
CREDENTIALS = {
    "ca.pem": "tls/ca.pem",
    "client.pem": "client/provisioner.pem",
    "client.key": "client/provisioner.key",
    "join.key": "client/join.key",
}


def chown_tree(top: Path, uid: int, gid: int) -> None:
    os.chown(top, uid, gid)
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            os.chown(Path(root) / name, uid, gid, follow_symlinks=False)


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory the unprivileged user can reach (pytest's own tmp_path is root's 0700)."""
    path = Path(tempfile.mkdtemp(prefix="xceprov-unpriv-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def owned_by(world: SimWorld, uid: int, gid: int) -> Iterator[None]:
    """The simulated cloud's store is the daemon's Terraform provider's to write; root's again
    afterwards, so that ``xceprov sim down`` finds the world as it left it."""
    chown_tree(world.sim, uid, gid)
    try:
        yield
    finally:
        chown_tree(world.sim, 0, 0)


def unprivileged(uid: int, gid: int) -> list[str]:
    """The command prefix that runs what follows as the user with no capability, as the unit does."""
    return [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={gid}",
        "--clear-groups",
        "--bounding-set=-all",
        "--inh-caps=-all",
        "--no-new-privs",
    ]


def python_for(drop: list[str]) -> tuple[str, dict[str, str]]:
    """An interpreter the user can run, for the daemon and the children it starts with it.

    A site installs the toolkit where its service's user can run it; a test machine's virtual
    environment may use an interpreter under root's home. Then the system's interpreter of the
    same version runs the same code: this checkout and the environment's packages on its path.
    """
    probe = [*drop, "/bin/sh", "-c", 'exec "$0" -c "import orchestrator.cli"']
    if subprocess.run([*probe, sys.executable], capture_output=True, check=False).returncode == 0:
        return sys.executable, {}
    system = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    path = {"PYTHONPATH": f"{ROOT}:{sysconfig.get_paths()['purelib']}"}
    if system.is_file():
        probe_env = {**os.environ, **path}
        if subprocess.run([*probe, str(system)], capture_output=True, env=probe_env, check=False).returncode == 0:
            return str(system), path
    pytest.skip(f"no Python {sys.version_info.major}.{sys.version_info.minor} that user {USER} can run")


def site_config(world: SimWorld) -> dict[str, Any]:
    cfg: dict[str, Any] = yaml.safe_load((world.site / "xceprov.yaml").read_text())
    del cfg["state_dir"]  # from $STATE_DIRECTORY
    controller = cfg["controller"]
    controller.update(
        {
            "ca": "credential:ca.pem",
            "client_cert": "credential:client.pem",
            "client_key": "credential:client.key",
            "join_key": "credential:join.key",
        }
    )
    cfg["daemon"] = {"reconcile_interval": "2s", "stop_timeout": f"{STOP_TIMEOUT}s"}
    cfg["ansible"] = {"timeout": "4s"}
    return cfg


def test_the_daemon_runs_as_an_unprivileged_user_with_systemds_directories(base: Path) -> None:
    user = pwd.getpwnam(USER)
    uid, gid = user.pw_uid, user.pw_gid
    with sim_world(base / "site", f"unp-{secrets.token_hex(3)}") as world, owned_by(world, uid, gid):
        etc = base / "etc"
        etc.mkdir(mode=0o755)
        (etc / "xceprov.yaml").write_text(yaml.safe_dump(site_config(world)))
        (etc / "xceprov.yaml").chmod(0o644)
        state = base / "state"
        home = state / "home"
        home.mkdir(parents=True)
        # The site's secrets: root's 0600 files (/etc/xceprov/client.key ...), which systemd
        # copies for the service into a directory the service's user owns.
        root_etc = base / "root-etc"
        root_etc.mkdir(mode=0o700)
        credentials = base / "credentials"
        credentials.mkdir()
        for name, source in CREDENTIALS.items():
            shutil.copyfile(world.sim / source, root_etc / name)
            (root_etc / name).chmod(0o600)
            shutil.copyfile(root_etc / name, credentials / name)
            (credentials / name).chmod(0o400)
        for path, mode in ((state, 0o700), (home, 0o700), (credentials, 0o500)):
            path.chmod(mode)
        chown_tree(state, uid, gid)
        chown_tree(credentials, uid, gid)

        drop = unprivileged(uid, gid)
        python, python_env = python_for(drop)
        env = {
            **world.env(),
            **python_env,
            "XCEPROV_CONFIG": str(etc / "xceprov.yaml"),
            "STATE_DIRECTORY": f"{state}:{home}",
            "CREDENTIALS_DIRECTORY": str(credentials),
            "HOME": str(home),
        }
        # The user cannot read root's client key, only the credential's copy.
        refused = subprocess.run([*drop, "cat", str(root_etc / "client.key")], capture_output=True, check=False)
        assert refused.returncode != 0 and b"Permission denied" in refused.stderr

        log_path = base / "daemon.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*drop, python, "-m", "orchestrator.cli", "daemon"],
                cwd=etc,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        status_path = state / "daemon" / "status.json"

        def leased() -> bool:
            assert proc.poll() is None, f"the daemon exited ({proc.returncode}):\n{log_path.read_text()}"
            if not status_path.exists():
                return False
            doc = json.loads(status_path.read_text())
            return doc["daemon"]["passes"] >= 1 and any(r["held"] for r in doc["leases"])

        try:
            wait_until("the unprivileged daemon's first pass with its lease", leased, timeout=120, every=0.2)
            doc = json.loads(status_path.read_text())
            assert doc["last_pass"]["ok"], log_path.read_text()
            assert doc["daemon"]["config"] == str(etc / "xceprov.yaml")
            info = status_path.stat()
            assert (info.st_uid, info.st_mode & 0o777) == (uid, 0o600)
            # The process really is the user's and holds no capability.
            proc_status = Path(f"/proc/{proc.pid}/status").read_text()
            assert f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}" in proc_status
            assert "CapEff:\t0000000000000000" in proc_status
            assert "CapBnd:\t0000000000000000" in proc_status
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(STOP_TIMEOUT + 30) == 0, log_path.read_text()
            assert json.loads(status_path.read_text())["daemon"]["state"] == "stopped"
            # Everything it wrote is the user's: nothing in the state directory is root's.
            assert {p.stat().st_uid for p in state.rglob("*")} == {uid}
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def as_user(base: Path, state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``xceprov ARGS`` as the unprivileged user on a small site whose ``state_dir`` is ``state_dir``."""
    user = pwd.getpwnam(USER)
    drop = unprivileged(user.pw_uid, user.pw_gid)
    python, python_env = python_for(drop)
    (base / "xceprov.yaml").write_text(
        "cluster: site1\n"
        f"state_dir: {state_dir}\n"
        "controller: {ca: system, addresses: ['127.0.0.1:1']}\n"
        "providers: {sim: {module: xcesim}}\n"
        "templates: {cpu: {providers: {sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.34}}}}\n"
    )
    (base / "xceprov.yaml").chmod(0o644)
    env = {**os.environ, **python_env, "XCEPROV_CONFIG": str(base / "xceprov.yaml")}
    return subprocess.run(
        [*drop, python, "-m", "orchestrator.cli", *args],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def denied_line(path: Path) -> str:
    """The one line docs/configuration.md promises for a directory the user cannot create or enter."""
    return (
        f"xceprov: {path}: permission denied: uid {pwd.getpwnam(USER).pw_uid} cannot create or enter it; "
        "give it to the user the toolkit runs as, or choose another place"
    )


def test_a_state_dir_the_user_cannot_create_is_one_line_naming_it(base: Path) -> None:
    root_only = base / "root-only"
    root_only.mkdir(mode=0o700)
    done = as_user(base, root_only / "state", "ops")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [denied_line(root_only / "state")]


# Issue 27 item 20: each was "internal error: PermissionError" (exit 70) on a file below the directory.
ROOTS_STATE_VERBS = [("ops",), ("plan", "cpu=1"), ("validate",), ("terraform", "lock"), ("daemon",), ("status",)]


@pytest.mark.parametrize("verb", ROOTS_STATE_VERBS, ids=[" ".join(v) for v in ROOTS_STATE_VERBS])
def test_an_existing_state_dir_the_user_cannot_enter_is_one_line_naming_it(base: Path, verb: tuple[str, ...]) -> None:
    """A state directory root made and uses (0700): the user can see it exists, not enter it."""
    state = base / "state"
    state.mkdir(mode=0o700)
    (state / "work").mkdir(mode=0o700)  # as root's own runs leave it
    done = as_user(base, state, *verb)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [denied_line(state)]
    assert sorted(p.name for p in state.iterdir()) == ["work"]  # nothing written


def test_a_file_of_roots_in_the_users_state_dir_is_one_line_naming_it(base: Path) -> None:
    """Past the directory, a file the user may not read (root ran a verb there once) is named too."""
    user = pwd.getpwnam(USER)
    state = base / "state"
    state.mkdir(mode=0o700)
    os.chown(state, user.pw_uid, user.pw_gid)
    breakers = state / "breakers.json"
    breakers.write_text("{}")
    breakers.chmod(0o600)
    done = as_user(base, state, "breaker", "reset", "cpu")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"xceprov: {breakers}: permission denied: uid {user.pw_uid} may not use it"
    ]


def test_a_directory_of_roots_in_the_users_state_dir_is_one_line_naming_it(base: Path) -> None:
    """Below the user's own state directory, a working directory root made (0700) is named."""
    user = pwd.getpwnam(USER)
    state = base / "state"
    state.mkdir(mode=0o700)
    os.chown(state, user.pw_uid, user.pw_gid)
    (state / "work").mkdir(mode=0o700)
    done = as_user(base, state, "plan", "cpu=1")
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [denied_line(state / "work")]
