"""The toolkit built as a wheel and an sdist, installed with pip into a throw-away virtual
environment, run from an empty directory with no checkout in sight (issue 28, item 1).

``python -m build`` makes the sdist and then the wheel from that sdist, so the wheel proves the
sdist complete too. The environment is a plain ``python -m venv`` (no system site packages);
pip installs the wheel and its dependencies through its normal configuration. Every command
runs the installed ``xceprov`` in a directory of its own, with no ``PYTHONPATH`` and no
``XCEPROV_CONFIG``: the sequence of a newcomer, ``init``, ``validate``, ``plan``, ``sim up``,
``apply`` (root: ``--bootstrap`` of one simulated host), ``provider`` through the shipped
contract script, ``daemon`` until SIGTERM, ``destroy``, ``sim down``. Nothing may be written
into the installed package (a daemon's user may not write there).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim_controller_helpers import free_port
from sim_world_helpers import can_run_hosts, wait_until

from orchestrator.sim.cloud.store import CloudStore
from orchestrator.sim.hosts import lab as labnet

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Installed:
    """The throw-away environment holding the installed wheel."""

    venv: Path
    package: Path  # <site-packages>/orchestrator

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "XCEPROV_CONFIG", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(self, site: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "xceprov"), *args],
            cwd=site,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, site: Path, *args: str, timeout: float = 300) -> str:
        done = self.run(site, *args, timeout=timeout)
        assert done.returncode == 0, f"xceprov {' '.join(args)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def files(self) -> dict[str, str]:
        """Every file of the installed package and a digest of it (bytecode caches aside)."""
        return {
            str(p.relative_to(self.package)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(self.package.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts
        }


def _run(*argv: str | Path, cwd: Path, timeout: float = 600) -> str:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(map(str, argv))}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    top = tmp_path_factory.mktemp("wheel")
    dist = top / "dist"
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT, cwd=top)
    [wheel] = dist.glob("*.whl")
    assert len(list(dist.glob("*.tar.gz"))) == 1, sorted(dist.iterdir())
    venv = top / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=top)
    _run(venv / "bin" / "python", "-m", "pip", "install", "-q", wheel, cwd=top)
    where = _run(venv / "bin" / "python", "-c", "import orchestrator; print(orchestrator.__file__)", cwd=top)
    package = Path(where.strip()).parent
    # The installed copy, not this checkout: its files are its own, no link back here.
    assert package.is_relative_to(venv) and not any(p.is_symlink() for p in package.rglob("*"))
    return Installed(venv=venv, package=package)


def _data_files(top: Path) -> set[str]:
    """The toolkit's data files below ``top`` (links followed, as the build follows them)."""
    found = set()
    for root, dirs, files in os.walk(top, followlinks=True):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "__pycache__"]
        found.update(str((Path(root) / f).relative_to(top)) for f in files if not f.startswith("."))
    return found


def _site_config(site: Path, port: int, gateway: str) -> None:
    """The file ``init`` wrote, on this test's own controller port (the defaults are the product's)."""
    path = site / "xceprov.yaml"
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    cfg["cluster"] = f"wh{os.getpid()}"
    cfg["controller"].update({"addresses": [f"127.0.0.1:{port}"], "worker_addresses": [f"{gateway}:{port}"]})
    cfg["controller"].update({"connect_timeout": 2, "request_timeout": 5})
    cfg["daemon"] = {"reconcile_interval": "2s", "stop_timeout": "30s"}
    path.write_text(yaml.safe_dump(cfg))


@contextlib.contextmanager
def _world(tool: Installed, site: Path, lab: labnet.LabConfig | None) -> Iterator[int]:
    """``xceprov sim up`` (with ``lab``: the simulated hosts too) on a free port; ``sim down`` at the end."""
    port = free_port()
    _site_config(site, port, lab.gateway if lab is not None else "127.0.0.1")
    down: subprocess.CompletedProcess[str] | None = None
    try:
        where = ["--only", "controller"] if lab is None else ["--lab-name", lab.name, "--lab-subnet", str(lab.subnet)]
        tool.ok(site, "sim", "up", *where, "--controller-port", str(port))
        if lab is not None:
            # The cloud hands out addresses from the start of 10.213.0.0/16; this world's hosts
            # live in the test's own /24 (as tests/sim_world_helpers.py does).
            offset = int(lab.subnet.network_address) - int(labnet.LAB_SPACE.network_address) + 10
            CloudStore(site / ".xceprov" / "sim" / "cloud.sqlite").close()  # its tables, made on first open
            with contextlib.closing(sqlite3.connect(site / ".xceprov" / "sim" / "cloud.sqlite")) as conn, conn:
                conn.execute("UPDATE meta SET value = ? WHERE key = 'next_addr'", (str(offset),))
        yield port
        down = tool.run(site, "sim", "down", timeout=120)
    finally:
        if down is None:
            tool.run(site, "sim", "down", timeout=120)
    assert down.returncode == 0, down.stderr


def _daemon_once(tool: Installed, site: Path) -> str:
    """``xceprov daemon`` until its first pass is done, then SIGTERM; its log."""
    log_path = site / "daemon.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [str(tool.venv / "bin" / "xceprov"), "daemon"],
            cwd=site,
            env=tool.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            status = site / ".xceprov" / "daemon" / "status.json"

            def first_pass() -> bool:
                assert proc.poll() is None, log_path.read_text()
                return status.exists() and json.loads(status.read_text())["daemon"]["passes"] >= 1

            wait_until("the daemon's first pass", first_pass, timeout=120, every=0.2)
            os.kill(proc.pid, signal.SIGTERM)
            assert proc.wait(60) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
    return log_path.read_text()


@contextlib.contextmanager
def _lab_if_root(tag: str) -> Iterator[labnet.LabConfig | None]:
    """A test lab of its own when simulated hosts can run here (root), else None (no hosts)."""
    if not can_run_hosts():
        yield None
        return
    from sim_labs import claim_test_lab

    lab = claim_test_lab(tag)
    try:
        yield lab
    finally:
        labnet.destroy_lab(lab)


def test_the_installed_wheel_runs_every_verb_from_an_empty_directory(installed: Installed, tmp_path: Path) -> None:
    """As root, ``apply --bootstrap`` bootstraps one simulated host; without root the world has
    no hosts and ``apply`` only creates the instance (everything else is the same)."""
    # Every file of the checkout's toolkit data is in the package (Terraform, templates, Ansible, contrib).
    assert _data_files(installed.package / "toolkit-data") == _data_files(ROOT / "orchestrator" / "toolkit-data")
    # The catalogue roots (a template's select:) are part of it, one per module.
    assert {f"terraform/catalogue/{m}/main.tf" for m in ("xcesim", "aws", "openstack")} <= _data_files(
        installed.package / "toolkit-data"
    )
    # The shipped workload trace of the replay (docs/replay.md), made by scripts/make_trace.py.
    assert "traces/model-day.swf" in _data_files(installed.package / "toolkit-data")
    before = installed.files()
    site = tmp_path / "site"
    site.mkdir()
    # With no file at all: the built-in configuration, checked against the package's own data.
    checked = installed.run(site, "validate")
    assert checked.returncode == 0, checked.stderr
    assert "ok: terraform/roots/xcesim + terraform/modules/xcesim (provider sim)" in checked.stdout.splitlines()
    assert "ok: playbook ansible/playbooks/bootstrap.yml" in checked.stdout.splitlines()
    # A newcomer's first step: the simulated world's configuration, which validates as written.
    out = installed.ok(site, "init")
    assert "wrote xceprov.yaml" in out and (site / "xceprov.yaml").is_file()
    assert installed.ok(site, "validate", "-q") == ""
    again = installed.run(site, "init")
    assert again.returncode == 1 and again.stderr.strip().endswith(
        "nothing written (xceprov init never overwrites: move it away or give another DIR)"
    )

    with _lab_if_root(f"{os.getpid()}/wheel") as lab, _world(installed, site, lab):
        installed.ok(site, "validate", "-q")
        installed.ok(site, "plan", "cpu=1", "--out", "burst")
        if lab is None:
            assert "1 cpu instances created" in installed.ok(site, "apply", "burst")
        else:
            applied = installed.ok(site, "apply", "burst", "--bootstrap", timeout=600)
            assert re.search(r"\s10\.213\.\d+\.\d+\s+bootstrap (ok|changed)\n", applied), applied

        # The provider contract through the script the wheel ships (executable, calls xceprov on PATH).
        scripts = installed.package / "toolkit-data" / "contrib" / "provider-contract" / "scripts"
        (site / "request.json").write_text("{}")
        answer = subprocess.run(
            [str(scripts / "getAvailableTemplates.sh"), "-f", "request.json"],
            cwd=site,
            env=installed.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert answer.returncode == 0, answer.stderr
        assert {t["templateId"] for t in json.loads(answer.stdout)["templates"]} >= {"cpu.sim", "gpu.sim"}

        cloud = CloudStore(site / ".xceprov" / "sim" / "cloud.sqlite")
        assert len(cloud.list_instances({"xce:cluster": f"wh{os.getpid()}"})) == 1
        installed.ok(site, "destroy", "--all", timeout=600)
        assert cloud.list_instances({"xce:cluster": f"wh{os.getpid()}"}) == []
        cloud.close()
        log = _daemon_once(installed, site)
        assert "stopped: no work in flight" in log, log
    assert installed.files() == before, "something was written into the installed package"
