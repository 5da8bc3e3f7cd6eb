"""What an interrupted apply leaves on disk, through the command line as a user runs it.

The database of ``terraform.backend: pg`` stopped mid-apply of a standalone site (its lock is in
that database): exit 75 with the toolkit's advice, Terraform's ``errored.tfstate`` is private,
and ``xceprov ops resume`` writes it back before anything else, then removes it. An
apply killed with ``kill -9``: its saved plan never reaches ``$TMPDIR``, and what it left in the
state directory is removed by the next op.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_run import resume_when_admitted, xceprov
from pg_server import PgServer, standalone_site

from orchestrator.configfile import ENV_VAR
from orchestrator.sim.cloud.store import CloudStore

pytestmark = pytest.mark.integration


@pytest.fixture
def tmpdir_of_run() -> Iterator[Path]:
    """The ``$TMPDIR`` of the apply: short, since the attached provider's socket is made in it
    (a Unix socket path has ~100 bytes), and the test's own."""
    path = Path(tempfile.mkdtemp(prefix="xt-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def site(tmp_path: Path, cluster: str, backend: str) -> Path:
    path = tmp_path / "site"
    path.mkdir()
    (path / "xceprov.yaml").write_text(
        standalone_site(
            cluster, f"{{backend: {backend}, parallelism: 1}}", shard_size=2, store=tmp_path / "cloud.sqlite"
        )
    )
    return path


def start_apply(path: Path, tmpdir: Path) -> subprocess.Popen[str]:
    """``xceprov apply burst`` in the background, with its own ``$TMPDIR``."""
    env = {**os.environ, ENV_VAR: str(path / "xceprov.yaml"), "TMPDIR": str(tmpdir)}
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "apply", "burst"],
        cwd=path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: object, proc: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():  # type: ignore[operator]
        assert proc.poll() is None, f"the apply ended before {what}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


def not_private(root: Path) -> dict[str, str]:
    """Files not 0600 and directories not 0700 under ``root`` (links are not followed)."""
    found = {}
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            found[str(path.relative_to(root))] = oct(mode)
    return found


def test_the_state_terraform_could_not_write_is_private_and_written_back_by_the_resume(
    tmp_path: Path, server: PgServer, conn_str: str, tmpdir_of_run: Path
) -> None:
    path = site(tmp_path, "errored", "pg")
    cloud = CloudStore(tmp_path / "cloud.sqlite")
    assert xceprov(path, "plan", "cpu=2", "--out", "burst").returncode == 0
    cloud.set_slow_launch(8)  # one create at a time (parallelism 1), 8 s each
    proc = start_apply(path, tmpdir_of_run)
    try:
        # The first instance is in the state Terraform holds, the second is being created.
        wait_for(lambda: len(cloud.list_instances({"xce:cluster": "errored"})) == 1, proc, "the first create")
        server.stop()
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if not server.running:
            server.start()
    work = path / "state" / "work" / "errored" / "sim"
    errored = work / "errored.tfstate"
    assert errored.is_file(), stderr
    # The standalone lock went with the database: the store's outage (75), the toolkit's advice.
    assert proc.returncode == 75, stderr
    [line] = [ln for ln in stderr.splitlines() if ln.startswith("xceprov:")]
    # Which of the two notices it first depends on timing: the fence closing (its lease row no
    # longer renewed) or Terraform failing to write its state. Both are the store's outage, name
    # the state kept and the resume, and ask for no force-unlock.
    assert "shared store stopped answering" in line or "shared store holding its state cannot be reached" in line
    assert str(errored) in line and "xceprov ops resume" in line
    assert "force-unlock" not in stderr and conn_str not in stderr
    assert not_private(path / "state" / "work") == {}
    recorded = json.loads(errored.read_text())
    assert recorded["resources"], "the state Terraform could not write records the first instance"

    cloud.set_slow_launch(0)
    # The apply ended without releasing its lease row (the database was away): the resume is
    # admitted once the row expired and its grace passed.
    resumed = resume_when_admitted(path)
    assert resumed.returncode == 0, resumed.stderr
    assert not errored.exists()
    entries = [json.loads(line) for line in (path / "state" / "audit.log").read_text().splitlines()]
    [pushed] = [e for e in entries if e.get("action") == "errored-state-pushed"]
    assert pushed["provider"] == "sim" and pushed["file"] == str(errored)
    assert [e for e in entries if e.get("action") == "errored-state-superseded"] == []
    assert len(cloud.list_instances({"xce:cluster": "errored"}, include_terminated=True)) == 2
    listed = xceprov(path, "ops", "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["providers"][0]["open"] == []


def test_a_killed_apply_leaves_no_plan_in_tmpdir_and_the_next_op_removes_its_scratch(
    tmp_path: Path, tmpdir_of_run: Path
) -> None:
    path = site(tmp_path, "killed", "local")
    cloud = CloudStore(tmp_path / "cloud.sqlite")
    assert xceprov(path, "plan", "cpu=1", "--out", "burst").returncode == 0
    cloud.set_slow_launch(5)
    tmpdir = tmpdir_of_run
    proc = start_apply(path, tmpdir)
    audit = path / "state" / "audit.log"
    try:
        wait_for(lambda: '"op-apply"' in (audit.read_text() if audit.exists() else ""), proc, "the apply")
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signal.SIGKILL
    # The saved plan (user data, tags, settings) was never in $TMPDIR ...
    # (the attached provider's socket directory is there, removed at the next attach: security.md)
    assert [p for p in tmpdir.rglob("*") if p.suffix == ".tfplan" or p.name.startswith("xceprov-op-")] == []
    # ... but in the private state directory, where a killed run leaves it ...
    scratch = path / "state" / "scratch"
    left = [p.name for p in scratch.rglob("*.tfplan")]
    assert left == ["op.tfplan"]
    assert not_private(scratch) == {}

    # ... until the next op of any process: the resume removes it.
    cloud.set_slow_launch(0)
    resumed = xceprov(path, "ops", "resume")
    assert resumed.returncode == 0, resumed.stderr
    assert list(scratch.iterdir()) == []
