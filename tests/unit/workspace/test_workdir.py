"""Working directories are built atomically and privately; the desired set is replaced, never rewritten."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from tffake import ROOT, FakeEngine, site_config

from orchestrator.errors import FinalError, TerraformError
from orchestrator.workspace.desired import DesiredSet
from orchestrator.workspace.terraform import prepared_workdir
from orchestrator.workspace.workdir import STAMP, ProviderWorkdir


def workdir(tmp_path: Path) -> ProviderWorkdir:
    return ProviderWorkdir(site_config(tmp_path).config, "sim", ROOT)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_first_build_copies_root_and_module_initialises_and_is_private(tmp_path: Path) -> None:
    wd = workdir(tmp_path)
    assert prepared_workdir(FakeEngine(), wd) == wd.path
    assert (wd.path / "main.tf").is_file() and (wd.path / "module" / "main.tf").is_file()
    assert (wd.path / ".terraform").is_dir() and wd.is_current()
    for path in (wd.path, wd.path.parent, wd.path.parent.parent, wd.config.state_dir):
        assert mode(path) == 0o700, path
    # A current working directory is not built again.
    engine = FakeEngine()
    prepared_workdir(engine, wd)
    assert engine.calls == []


def test_a_failed_init_leaves_no_working_directory_and_no_staging_copy(tmp_path: Path) -> None:
    wd = workdir(tmp_path)
    with pytest.raises(TerraformError):
        prepared_workdir(FakeEngine(fail_init=True), wd)
    assert not wd.path.exists()
    assert [p.name for p in wd.path.parent.iterdir() if "staging" in p.name] == []


def test_a_rebuild_keeps_state_and_desired_set_and_a_failed_one_changes_nothing(tmp_path: Path) -> None:
    wd = workdir(tmp_path)
    prepared_workdir(FakeEngine(), wd)
    wd.desired.write({"instances": {}, "common_tags": {}, "settings": {}})
    (wd.path / "terraform.tfstate").write_text('{"serial": 3}')
    (wd.path / STAMP).write_text("an older toolkit\n")  # the shipped sources changed
    with pytest.raises(TerraformError):
        prepared_workdir(FakeEngine(fail_init=True), wd)
    assert (wd.path / STAMP).read_text() == "an older toolkit\n"  # not half-refreshed
    prepared_workdir(FakeEngine(), wd)
    assert wd.is_current()
    assert (wd.path / "terraform.tfstate").read_text() == '{"serial": 3}'
    assert json.loads(wd.desired_file.read_text())["instances"] == {}


def test_an_existing_wider_state_directory_is_tightened(tmp_path: Path) -> None:
    wd = workdir(tmp_path)
    wd.config.state_dir.mkdir(mode=0o755)
    os.chmod(wd.config.state_dir, 0o755)
    prepared_workdir(FakeEngine(), wd)
    assert mode(wd.config.state_dir) == 0o700


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the directory to another user")
def test_a_wider_state_directory_of_another_user_is_reported(tmp_path: Path) -> None:
    wd = workdir(tmp_path)
    wd.config.state_dir.mkdir()
    os.chmod(wd.config.state_dir, 0o755)
    os.chown(wd.config.state_dir, 65534, 65534)
    with pytest.raises(FinalError, match=r"mode 0755 lets others read .*\(chmod 700"):
        prepared_workdir(FakeEngine(), wd)
    assert mode(wd.config.state_dir) == 0o755


def test_desired_set_restore_replaces_the_file_instead_of_rewriting_it(tmp_path: Path) -> None:
    desired = DesiredSet(tmp_path / "desired.tfvars.json")
    desired.write({"instances": {}, "settings": {"v": 1}})
    snapshot = desired.snapshot()
    desired.write({"instances": {}, "settings": {"v": 2}})
    observer = tmp_path / "observer"
    os.link(desired.path, observer)  # a reader that opened the refused set
    desired.restore(snapshot)
    assert json.loads(desired.path.read_text())["settings"] == {"v": 1}
    # An in-place rewrite would have changed what the reader sees mid-way.
    assert json.loads(observer.read_text())["settings"] == {"v": 2}
    assert mode(desired.path) == 0o600


def test_desired_set_restore_of_nothing_removes_the_file(tmp_path: Path) -> None:
    desired = DesiredSet(tmp_path / "desired.tfvars.json")
    snapshot = desired.snapshot()
    desired.write({"instances": {}})
    desired.restore(snapshot)
    assert not desired.path.exists()


def test_an_unreadable_desired_set_is_one_line_naming_the_file(tmp_path: Path) -> None:
    desired = DesiredSet(tmp_path / "desired.tfvars.json")
    desired.path.write_text('{"instances": {"k": {"name": ""}}}')
    with pytest.raises(FinalError) as info:
        desired.read()
    assert str(info.value).startswith(f"{desired.path}: unreadable desired set")
    assert "\n" not in str(info.value)


def test_module_examples_are_neither_copied_nor_part_of_the_digest(tmp_path: Path) -> None:
    toolkit = tmp_path / "toolkit"
    shutil.copytree(ROOT / "terraform", toolkit / "terraform")
    wd = ProviderWorkdir(site_config(tmp_path).config, "sim", toolkit)
    prepared_workdir(FakeEngine(), wd)
    assert (wd.module_src / "examples").is_dir()
    assert not (wd.path / "module" / "examples").exists()
    digest = wd.source_digest()
    example = next((wd.module_src / "examples").rglob("*.tf"))
    example.write_text(example.read_text() + "\n# an edit a user makes while learning the module\n")
    assert wd.source_digest() == digest
    assert wd.is_current()
