"""Atomic writes are durable (the directory is fsync'd after the rename) and private; so is the audit log."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from orchestrator import durable
from orchestrator.errors import UsageError
from orchestrator.workspace.audit import audit
from orchestrator.workspace.bundle import read_bundle
from orchestrator.workspace.desired import DesiredSet


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Directories fsync'd, in order (the real fsync still runs)."""
    seen: list[Path] = []
    real = durable.fsync_dir

    def record(path: Path) -> None:
        real(path)
        seen.append(Path(path))

    monkeypatch.setattr(durable, "fsync_dir", record)
    return seen


def test_every_desired_set_change_is_followed_by_a_directory_fsync(tmp_path: Path, synced: list[Path]) -> None:
    desired = DesiredSet(tmp_path / "desired.tfvars.json")
    snapshot = desired.snapshot()
    desired.write({"instances": {}})
    assert synced == [tmp_path]
    desired.write({"instances": {}, "x": 1})
    desired.restore(desired.snapshot())
    desired.restore(snapshot)  # removal is a directory change too
    assert synced == [tmp_path] * 4 and not desired.path.exists()


def test_atomic_writes_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        durable.write_json_atomic(tmp_path / "a.json", {"k": "v"})
    finally:
        os.umask(old)
    assert json.loads((tmp_path / "a.json").read_text()) == {"k": "v"}
    assert mode(tmp_path / "a.json") == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_a_failed_write_keeps_the_old_content_and_leaves_no_temporary(tmp_path: Path) -> None:
    durable.write_json_atomic(tmp_path / "a.json", {"k": 1})
    with pytest.raises(TypeError):
        durable.write_json_atomic(tmp_path / "a.json", {"k": object()})
    assert json.loads((tmp_path / "a.json").read_text()) == {"k": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def test_audit_log_is_private_and_an_older_wider_log_is_narrowed(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    (state / "audit.log").write_text("")
    os.chmod(state / "audit.log", 0o644)
    entry = audit(state, "apply", provider="sim", keys=["k1"])
    assert mode(state) == 0o700 and mode(state / "audit.log") == 0o600
    [line] = (state / "audit.log").read_text().splitlines()
    assert json.loads(line) == json.loads(json.dumps(dict(entry)))
    assert json.loads(line)["action"] == "apply" and json.loads(line)["keys"] == ["k1"]


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ({"format": 2, "cluster": "c", "providers": []}, "unsupported format 2"),
        ({"format": 1, "cluster": "c", "providers": {}}, "'providers' must be a list"),
        ({"format": 1, "cluster": "c", "providers": [{"name": "sim", "plan_file": "../x.tfplan"}]}, "malformed"),
        (
            {"format": 1, "cluster": "c", "providers": [{"name": "sim", "plan_file": "s.tfplan", "lost": "op-1"}]},
            "provider 'sim': 'lost' must be a list of instance keys",
        ),
        (
            {"format": 1, "cluster": "c", "providers": [{"name": "sim", "plan_file": "s.tfplan", "lost": [7]}]},
            "'lost' must be a list of instance keys",
        ),
        ({"format": 1, "cluster": "c", "providers": [{"name": "sim", "plan_file": ".."}]}, "malformed"),
        ({"format": 1, "cluster": "c", "providers": [{"name": "sim", "plan_file": ""}]}, "malformed"),
        ({"format": 1, "cluster": "c", "providers": [{"name": "sim", "plan_file": "manifest.json"}]}, "malformed"),
        ({"format": 1, "cluster": "c", "providers": [{"name": "sim", "plan_file": "a\0.tfplan"}]}, "malformed"),
        (
            {"format": 1, "cluster": "c", "providers": [{"name": "s", "plan_file": "s.tfplan"}] * 2},
            "'s' is listed twice",
        ),
        ([1, 2], "not a JSON object"),
    ],
)
def test_a_bad_manifest_is_one_line_naming_it(tmp_path: Path, manifest: object, message: str) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UsageError) as info:
        read_bundle(tmp_path, "c")
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(tmp_path / "manifest.json") in str(info.value)


def test_only_owned_directories_nobody_holds_are_removed_as_stale(tmp_path: Path) -> None:
    held = durable.OwnedDir(tmp_path, "run-")
    try:
        assert mode(held.path) == 0o700 and mode(held.path / durable.OWNER_LOCK) == 0o600
        assert (held.path / durable.OWNER_LOCK).read_text() == f"{os.getpid()}\n"
        # Released as a killed process releases it: the lock file stays, nobody holds it.
        gone = durable.OwnedDir(tmp_path, "run-")
        os.close(gone.lock_fd)
        unmarked = tmp_path / "run-unmarked"  # being made this instant, or not ours: kept
        unmarked.mkdir()
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / durable.OWNER_LOCK).write_text("1\n")
        (tmp_path / "run-link").symlink_to(elsewhere)  # a link is never followed
        other = tmp_path / "other-prefix"
        other.mkdir()
        (other / durable.OWNER_LOCK).write_text("1\n")
        assert durable.remove_stale(tmp_path, "run-") == [gone.path]
        assert held.path.exists() and unmarked.exists() and (elsewhere / durable.OWNER_LOCK).exists()
        assert other.exists()
        assert durable.remove_stale(tmp_path / "absent", "run-") == []
    finally:
        held.close()
    assert not held.path.exists()
    reused = os.open(os.devnull, os.O_RDONLY)  # likely the lock's number, free again
    try:
        held.close()  # a second close (a stop step, then the run's end) leaves it alone
        os.fstat(reused)
    finally:
        os.close(reused)
