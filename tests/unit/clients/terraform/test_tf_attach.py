"""Attached providers: which commands get one, what a provider must print, how it ends."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from orchestrator.clients.terraform.attach import (
    HOLD_FDS_ENV,
    PROVIDERS_DIR,
    REATTACH_ENV,
    AttachedProvider,
    AttachError,
    attached,
    wanted,
)
from orchestrator.clients.terraform.mirror import MIRROR_DIR, XCESIM, LocalProvider, ensure_mirror, launcher_env

LOCK = f'provider "{XCESIM.source}" {{\n  version = "0.1.0"\n}}\n'


def _initialised(tmp_path: Path, lock: str = LOCK) -> Path:
    (tmp_path / ".terraform.lock.hcl").write_text(lock)
    return tmp_path


@pytest.mark.parametrize("command", ["plan", "apply", "show", "import", "validate"])
def test_commands_that_start_providers_attach_the_locked_ones(tmp_path: Path, command: str) -> None:
    assert wanted([command, "-json"], _initialised(tmp_path), [XCESIM]) == [XCESIM]


@pytest.mark.parametrize("command", ["init", "output", "version", "fmt", "state"])
def test_commands_without_providers_attach_none(tmp_path: Path, command: str) -> None:
    # init above all: an attached provider would be left out of the lock file.
    assert wanted([command], _initialised(tmp_path), [XCESIM]) == []


def test_a_directory_not_initialised_or_not_using_the_provider_attaches_none(tmp_path: Path) -> None:
    assert wanted(["plan"], tmp_path, [XCESIM]) == []
    other = 'provider "registry.terraform.io/hashicorp/aws" {\n}\n'
    assert wanted(["plan"], _initialised(tmp_path, other), [XCESIM]) == []


def _installed(workdir: Path, spec: LocalProvider, import_path: Path) -> dict[str, str]:
    """``spec``'s launcher linked into ``workdir`` as ``init`` links it; the environment it needs."""
    launcher = ensure_mirror(workdir / "tf", [spec]).parent / MIRROR_DIR / spec.executable_relpath()
    linked = workdir / PROVIDERS_DIR / spec.executable_relpath()
    linked.parent.mkdir(parents=True, exist_ok=True)
    linked.unlink(missing_ok=True)
    linked.symlink_to(launcher)
    return {**os.environ, **launcher_env([spec]), "XCEPROV_PYTHONPATH": str(import_path)}


def _fake(tmp_path: Path, body: str) -> tuple[LocalProvider, dict[str, str]]:
    """A provider module whose ``--dev`` mode runs ``body``, installed in ``tmp_path``."""
    name = f"fake_provider_{abs(hash(body)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    spec = LocalProvider("xce", "fake", "0.1.0", name)
    return spec, _installed(tmp_path, spec, tmp_path)


def test_a_provider_printing_no_address_is_refused_with_its_module_named(tmp_path: Path) -> None:
    spec, env = _fake(tmp_path, "print('Running in dev mode')\n")
    with pytest.raises(AttachError, match=f"{spec.module} exited or printed no address"):
        AttachedProvider.start(spec, tmp_path, env)


def test_a_tcp_or_malformed_address_is_refused(tmp_path: Path) -> None:
    tcp = f"""
        import json, sys
        addr = {{"Network": "tcp", "String": "127.0.0.1:1"}}
        doc = {{"{XCESIM.source}".replace("xcesim", "fake"): {{"Addr": addr}}}}
        print("\\texport {REATTACH_ENV}='" + json.dumps(doc) + "'")
        sys.stdin.read()
    """
    spec, env = _fake(tmp_path, tcp)
    with pytest.raises(AttachError, match="no Unix socket address"):
        AttachedProvider.start(spec, tmp_path, env)
    spec, env = _fake(tmp_path, f"print(\"{REATTACH_ENV}='{{not json'\")\nimport sys; sys.stdin.read()\n")
    with pytest.raises(AttachError, match="unreadable address"):
        AttachedProvider.start(spec, tmp_path, env)


def test_a_provider_that_never_answers_is_given_up_and_ended(tmp_path: Path) -> None:
    spec, env = _fake(tmp_path, "import time\ntime.sleep(3600)\n")
    with pytest.raises(AttachError, match=r"printed no address within 0\.5 s"):
        AttachedProvider.start(spec, tmp_path, env, timeout=0.5)


def test_unattachable_providers_leave_the_command_to_terraform(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec, env = _fake(tmp_path, "raise SystemExit(3)\n")
    lock = f'provider "{spec.source}" {{\n}}\n'
    with caplog.at_level(logging.WARNING), attached(["plan"], _initialised(tmp_path, lock), [spec], env) as got:
        assert got.env == {} and got.fds == ()
    assert "provider not attached, Terraform launches it" in caplog.text and spec.module in caplog.text


def test_the_simulated_cloud_provider_attaches_and_ends_when_its_input_ends(tmp_path: Path) -> None:
    env = _installed(tmp_path, XCESIM, Path(__file__).resolve().parents[4])
    with attached(["plan", "-json"], _initialised(tmp_path), [XCESIM], env) as got:
        entry = json.loads(got.env[REATTACH_ENV])[XCESIM.source]
        assert entry["Addr"]["Network"] == "unix" and Path(entry["Addr"]["String"]).exists()
        assert got.env[HOLD_FDS_ENV] == ",".join(map(str, got.fds)) and len(got.fds) == 1
        (provider,) = got.providers
        assert provider.proc.poll() is None
        got.handed_over()  # nobody holds its input any more (no worker in this test)
        # It leaves by itself, with exit code 0: not killed after the stop timeout.
        assert provider.proc.wait(timeout=30) == 0
        socket_dir = Path(entry["Addr"]["String"]).parent
        assert socket_dir.is_relative_to(provider.scratch)
    # Ended, and nothing of it is left on disk (its socket's directory included).
    assert not provider.scratch.exists()


# A provider that prints its address and then runs on, whatever happens to its input: one the
# orchestrator's death does not end (as when the worker still holds its input).
LINGERING = f"""
    import json, os, sys, time
    addr = {{"Network": "unix", "String": os.path.join(os.environ["TMPDIR"], "plugin.sock")}}
    doc = {{"{XCESIM.source.replace("xcesim", "fake")}": {{"Addr": addr, "Pid": os.getpid()}}}}
    print("export {REATTACH_ENV}='" + json.dumps(doc) + "'", flush=True)
    time.sleep(3600)
"""

# An orchestrator that attaches the provider, says where its scratch is, and waits to be killed.
ORCHESTRATOR = """
import json, sys, time
from pathlib import Path
from orchestrator.clients.terraform.attach import attached
from orchestrator.clients.terraform.mirror import LocalProvider
spec, env = LocalProvider(*json.loads(sys.argv[1])), json.loads(sys.argv[2])
with attached(["plan"], Path(sys.argv[3]), [spec], env) as got:
    (provider,) = got.providers
    print(json.dumps([str(provider.scratch), provider.reattach["Pid"]]), flush=True)
    time.sleep(3600)
"""


def _gone(pid: int) -> bool:
    """``pid`` has ended (a zombie not reaped yet has closed its files, its locks with them)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not _gone(pid):
        assert time.monotonic() < deadline, f"process {pid} still there after SIGKILL"
        time.sleep(0.05)


def test_scratch_left_by_a_killed_orchestrator_goes_at_the_next_attach_once_its_provider_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    spec, env = _fake(tmp_path, LINGERING)
    workdir = _initialised(tmp_path, f'provider "{spec.source}" {{\n}}\n')
    args = [json.dumps([spec.namespace, spec.type, spec.version, spec.module]), json.dumps(env), str(workdir)]
    children: list[subprocess.Popen[str]] = []
    providers: list[int] = []

    def orchestrator() -> tuple[subprocess.Popen[str], Path]:
        proc = subprocess.Popen(
            [sys.executable, "-c", ORCHESTRATOR, *args],
            stdout=subprocess.PIPE,
            text=True,
            env={**env, "TMPDIR": str(temp)},
        )
        children.append(proc)
        assert proc.stdout is not None
        scratch, pid = json.loads(proc.stdout.readline())
        providers.append(pid)
        return proc, Path(scratch)

    def next_attach() -> None:
        broken, broken_env = _fake(tmp_path, "raise SystemExit(3)\n")  # attaching it fails: no new scratch
        with attached(["plan"], _initialised(tmp_path, f'provider "{broken.source}" {{\n}}\n'), [broken], broken_env):
            pass

    try:
        killed, killed_scratch = orchestrator()
        live, live_scratch = orchestrator()
        assert killed_scratch.parent == temp and (killed_scratch / "plugin.sock").parent.exists()
        _kill(killed.pid)  # kill -9: nothing of the orchestrator's cleanup runs
        next_attach()
        assert killed_scratch.exists()  # its provider still runs in it
        _kill(providers[0])
        next_attach()
        assert not killed_scratch.exists()  # both gone: removed
        assert live_scratch.exists() and live.poll() is None  # a live one's is kept
    finally:
        for pid in providers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for proc in children:
            proc.kill()
            proc.communicate()
