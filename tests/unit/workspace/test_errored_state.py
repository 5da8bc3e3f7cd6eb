"""Terraform's ``errored.tfstate``: the database stopped mid-apply, and the state written back later.

Real bundled Terraform on ``terraform_data`` only (no provider to install). With the pg backend
the database is the throw-away server of tests/pg_server.py, stopped while a resource's
``local-exec`` provisioner runs, so Terraform can write its state at the end nowhere.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.clients.postgres import unreachable
from orchestrator.clients.terraform.engine import BundledEngine
from orchestrator.errors import FinalError, StoreUnavailable
from orchestrator.workspace.erroredstate import recover_errored_state
from tests.pg_server import PgServer

PG_CONFIG = """
terraform {
  backend "pg" {}
}
resource "terraform_data" "a" {
  provisioner "local-exec" {
    command = "touch started && sleep 8"
  }
}
"""

LOCAL_CONFIG = """
variable "n" {
  type = number
}
resource "terraform_data" "a" {
  input = var.n
}
"""


@pytest.fixture
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_database_stopped_mid_apply_is_store_unavailable_and_its_state_is_pushed_back(
    tmp_path: Path, server: PgServer, conn_str: str, usual_umask: None
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o700)
    (workdir / "main.tf").write_text(PG_CONFIG)
    engine = BundledEngine(
        attach_providers=False,
        env={"PG_CONN_STR": conn_str},
        secrets=[conn_str],
        lock_timeout=5,
        backend_probe=lambda: unreachable(conn_str, connect_timeout=2),
    )
    engine.init(workdir, backend_config={"schema_name": "errored_0"})
    failures: list[BaseException] = []

    def apply() -> None:
        try:
            engine.apply(workdir)
        except BaseException as exc:
            failures.append(exc)

    worker = threading.Thread(target=apply)
    worker.start()
    try:
        while not (workdir / "started").exists() and worker.is_alive():
            worker.join(0.05)
        assert worker.is_alive(), failures
        server.stop()  # the resource is being created: its state can be written nowhere
        worker.join(120)
    finally:
        if not server.running:
            server.start()
    [failure] = failures
    assert isinstance(failure, StoreUnavailable) and failure.exit_code == 75
    message = str(failure)
    assert "\n" not in message and "force-unlock" not in message and conn_str not in message
    assert "cannot be reached" in message and "xceprov ops resume" in message
    assert str(workdir / "errored.tfstate") in message
    # What Terraform wrote there is private, whatever the umask.
    assert mode(workdir / "errored.tfstate") == 0o600
    assert mode(workdir / ".terraform" / "terraform.tfstate") == 0o600

    recovered = recover_errored_state(engine, workdir)
    assert recovered is not None and recovered.outcome == "pushed"
    assert recovered.resources == ("terraform_data.a",)
    assert not (workdir / "errored.tfstate").exists()
    state = engine.state_pull(workdir)
    assert [r["type"] for r in state["resources"]] == ["terraform_data"]
    assert recover_errored_state(engine, workdir) is None


def local_workdir(tmp_path: Path) -> tuple[BundledEngine, Path]:
    workdir = tmp_path / "work"
    workdir.mkdir(mode=0o700)
    (workdir / "main.tf").write_text(LOCAL_CONFIG)
    engine = BundledEngine(attach_providers=False)
    engine.init(workdir)
    return engine, workdir


def apply_n(engine: BundledEngine, workdir: Path, n: int) -> dict[str, object]:
    (workdir / "n.tfvars.json").write_text(json.dumps({"n": n}))
    engine.apply(workdir, var_files=[Path("n.tfvars.json")])
    return engine.state_pull(workdir)


def test_an_errored_state_newer_than_the_backend_is_pushed(tmp_path: Path) -> None:
    engine, workdir = local_workdir(tmp_path)
    first = apply_n(engine, workdir, 1)
    newer = {**first, "serial": int(str(first["serial"])) + 1}
    (workdir / "errored.tfstate").write_text(json.dumps(newer))
    recovered = recover_errored_state(engine, workdir)
    assert recovered is not None and recovered.outcome == "pushed"
    assert engine.state_pull(workdir)["serial"] == newer["serial"]
    assert not (workdir / "errored.tfstate").exists()


def test_an_errored_state_the_backend_moved_past_is_superseded_and_removed(tmp_path: Path) -> None:
    engine, workdir = local_workdir(tmp_path)
    first = apply_n(engine, workdir, 1)
    second = apply_n(engine, workdir, 2)
    (workdir / "errored.tfstate").write_text(json.dumps(first))
    recovered = recover_errored_state(engine, workdir)
    assert recovered is not None and recovered.outcome == "superseded"
    assert f"serial {second['serial']}" in recovered.reason
    assert recovered.evidence()["resources"] == ["terraform_data.a"]
    assert engine.state_pull(workdir)["serial"] == second["serial"]  # the newer record kept
    assert not (workdir / "errored.tfstate").exists()


def test_an_errored_state_that_cannot_be_read_is_kept_and_named(tmp_path: Path) -> None:
    engine, workdir = local_workdir(tmp_path)
    (workdir / "errored.tfstate").write_text('{"version": 4, "serial"')
    with pytest.raises(FinalError) as refused:
        recover_errored_state(engine, workdir)
    assert str(workdir / "errored.tfstate") in str(refused.value) and "cannot be read" in str(refused.value)
    assert (workdir / "errored.tfstate").exists()
