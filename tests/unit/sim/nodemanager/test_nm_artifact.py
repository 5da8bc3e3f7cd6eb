"""The node manager artifact: contents, reproducibility, and that it runs from an unpacked copy."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from orchestrator.sim.nodemanager import build_artifact
from orchestrator.sim.nodemanager.artifact import RUNTIME_MODULES


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_artifact(tmp_path_factory.mktemp("dist"))


def test_contents_and_manifest(artifact: Path) -> None:
    path = artifact
    assert path.name == "xce-node-manager-sim.tar.gz"
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        entry = tar.getmember("bin/xce-node-manager")
        manifest = json.loads(tar.extractfile("MANIFEST.json").read())  # type: ignore[union-attr]
    assert entry.mode & 0o111
    assert {f"lib/xce_node_manager/{m}" for m in RUNTIME_MODULES} <= names
    assert "lib/xce_node_manager/provisioner.capnp" in names
    assert "lib/capnp/__init__.py" in names
    assert not any("__pycache__" in n for n in names)
    assert not any(n.startswith(("/", "..")) for n in names)
    assert manifest["python_abi"] == sys.implementation.cache_tag


def test_reproducible(artifact: Path, tmp_path: Path) -> None:
    assert build_artifact(tmp_path).read_bytes() == artifact.read_bytes()


def test_runtime_modules_import_nothing_from_the_project() -> None:
    here = Path(__file__).resolve().parents[4] / "orchestrator" / "sim" / "nodemanager"
    for module in RUNTIME_MODULES:
        text = (here / module).read_text()
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith(("import orchestrator", "from orchestrator")):
                # Only the source-tree fallback for the schema may name the project package.
                assert module == "worker.py" and "orchestrator.protocol.schema" in stripped, line


def test_unpacked_entry_runs_in_isolation(artifact: Path, tmp_path: Path) -> None:
    with tarfile.open(artifact) as tar:
        tar.extractall(tmp_path / "opt", filter="data")
    # -I: no PYTHONPATH, no user site, no current directory: only what the artifact brings.
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            str(tmp_path / "opt/bin/xce-node-manager"),
            "worker",
            "--config",
            str(tmp_path / "missing.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert out.returncode == 78, out.stderr
    assert "cannot read" in out.stderr
    probe = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            "import sys; sys.path.insert(0, sys.argv[1]); import capnp, xce_node_manager.worker as w; "
            "s = w.load_schema(); print(s.Envelope.new_message(requestId=1, requestDemand=None).which())",
            str(tmp_path / "opt/lib"),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert probe.stdout.strip() == "requestDemand", probe.stderr
