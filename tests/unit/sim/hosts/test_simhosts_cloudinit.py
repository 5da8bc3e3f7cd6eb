"""The cloud-init subset of simulated hosts: #cloud-config write_files applied under a directory, keys to console."""

from __future__ import annotations

import base64
import gzip
import json
import os
import pwd
from pathlib import Path

import pytest

from orchestrator.model.published_keys import BEGIN, END, published_keys
from orchestrator.sim.hosts.cloudinit import (
    apply_write_files,
    decode_content,
    decode_permissions,
    keys_to_console,
    parse_user_data,
    run_cloud_init,
)
from orchestrator.sim.hosts.console import CONSOLE_LIMIT, console_output

ME = pwd.getpwuid(os.getuid()).pw_name


def test_classifies_user_data() -> None:
    assert parse_user_data("") == ("none", {})
    assert parse_user_data("#!/bin/sh\necho hi\n") == ("unsupported", {})
    assert parse_user_data("#cloud-config\n") == ("cloud-config", {})
    assert parse_user_data("#cloud-config\nwrite_files: []\n") == ("cloud-config", {"write_files": []})
    with pytest.raises(ValueError, match="mapping"):
        parse_user_data("#cloud-config\n- a\n")
    with pytest.raises(ValueError, match="not valid YAML"):
        parse_user_data("#cloud-config\nwrite_files: [\n")


@pytest.mark.parametrize(
    ("content", "encoding"),
    [
        ("hello", None),
        ("hello", "text/plain"),
        (base64.b64encode(b"hello").decode(), "b64"),
        (base64.b64encode(b"hello").decode(), "base64"),
        (base64.b64encode(gzip.compress(b"hello", mtime=0)).decode(), "gz+b64"),
        (base64.b64encode(gzip.compress(b"hello", mtime=0)).decode(), "gzip+base64"),
        (gzip.compress(b"hello", mtime=0), "gzip"),
    ],
)
def test_decodes_every_encoding_cloud_init_knows(content: str | bytes, encoding: str | None) -> None:
    assert decode_content(content, encoding) == b"hello"


def test_permissions_like_cloud_init() -> None:
    assert decode_permissions(None) == 0o644
    assert decode_permissions("0640") == 0o640
    assert decode_permissions("755") == 0o755
    assert decode_permissions(0o600) == 0o600  # a YAML 1.1 0600 arrives as this integer
    for bad in ("rw-r--r--", "99999", True):
        with pytest.raises(ValueError):
            decode_permissions(bad)


def test_write_files_applies_content_mode_append_defer_and_parents(tmp_path: Path) -> None:
    entries = [
        {"path": "/etc/xce/late", "content": "deferred\n", "defer": True},
        {"path": "/etc/xce/node.yaml", "content": "roles: [worker]\n", "permissions": "0600", "owner": ME},
        {"path": "/etc/xce/log", "content": "one\n"},
        {"path": "/etc/xce/log", "content": "two\n", "append": True},
    ]
    result = apply_write_files(entries, tmp_path)
    assert result.errors == []
    assert result.written == ["/etc/xce/node.yaml", "/etc/xce/log", "/etc/xce/log", "/etc/xce/late"]
    node = tmp_path / "etc/xce/node.yaml"
    assert node.read_text() == "roles: [worker]\n"
    assert node.stat().st_mode & 0o7777 == 0o600
    assert (tmp_path / "etc/xce/log").read_text() == "one\ntwo\n"
    assert (tmp_path / "etc/xce/late").stat().st_mode & 0o7777 == 0o644


def test_write_files_reports_bad_entries_and_keeps_going(tmp_path: Path) -> None:
    entries = [
        {"content": "no path"},
        {"path": "/a", "content": "abc", "encoding": "b64"},  # bad padding
        {"path": "/b", "source": {"uri": "http://example.invalid/x"}},
        {"path": "/c", "content": "x", "owner": "no-such-user-xce"},
        {"path": "/d", "content": "fine"},
    ]
    result = apply_write_files(entries, tmp_path)
    assert result.written == ["/c", "/d"]
    assert len(result.errors) == 4
    assert any("needs a 'path'" in e for e in result.errors)
    assert any(e.startswith("/b:") and "not supported" in e for e in result.errors)
    assert any(e.startswith("/c:") and "unknown owner" in e for e in result.errors)
    assert apply_write_files("not a list", tmp_path).errors == ["write_files must be a list, not str"]


def test_run_cloud_init_writes_markers_boot_finished_last(tmp_path: Path) -> None:
    user_data = "#cloud-config\nwrite_files:\n  - path: /opt/xce/x\n    content: y\npackages: [vim]\n"
    result = run_cloud_init(user_data, "i-123", tmp_path)
    assert result.written == ["/opt/xce/x"] and result.ignored == ["packages"]
    cloud = tmp_path / "var/lib/cloud"
    assert (cloud / "instance").resolve() == (cloud / "instances/i-123").resolve()
    assert (cloud / "instance/boot-finished").read_text().endswith("v. xcesim-0.1\n")
    assert (cloud / "instance/user-data.txt").read_text() == user_data
    assert json.loads((cloud / "data/result.json").read_text())["v1"]["errors"] == []
    # A second boot (stop/start) rewrites the markers.
    again = run_cloud_init("#!/bin/sh\n", "i-123", tmp_path)
    assert again.kind == "unsupported" and again.errors


def test_the_host_keys_sshd_serves_are_printed_as_cloud_init_does(tmp_path: Path) -> None:
    """Only the keys sshd_config names (what sshd serves) are published, in a block the toolkit reads."""
    ssh = tmp_path / "etc" / "ssh"
    ssh.mkdir(parents=True)
    served = "ssh-ed25519 " + base64.b64encode(b"\0\0\0\x0bssh-ed25519\0\0\0\x20" + b"k" * 32).decode()
    (ssh / "ssh_host_ed25519_key.pub").write_text(served + " root@h1\n")
    (ssh / "ssh_host_rsa_key.pub").write_text("ssh-rsa AAAAnotserved root@h1\n")
    assert keys_to_console(tmp_path) == ""  # no sshd_config yet: nothing served, nothing published
    (ssh / "sshd_config").write_text("Port 22\nHostKey /etc/ssh/ssh_host_ed25519_key\n")
    printed = keys_to_console(tmp_path)
    assert printed == f"{BEGIN}\n{served} root@h1\n{END}\n"
    assert published_keys("boot: ready\n" + printed) == [served]


def test_the_cloud_shows_a_console_by_instance_id_with_its_address(tmp_path: Path) -> None:
    host = tmp_path / "hosts" / "i-0123abcd"
    host.mkdir(parents=True)
    (host / "boot.json").write_text(json.dumps({"instance_id": "i-0123abcd", "address": "10.213.0.7"}))
    (host / "boot.log").write_bytes(b"boot: x\n" + b"y" * CONSOLE_LIMIT)
    out = console_output(tmp_path, "i-0123abcd")
    assert out is not None and (out.instance_id, out.address) == ("i-0123abcd", "10.213.0.7")
    assert out.text.startswith("boot: x\n") and len(out.text) == CONSOLE_LIMIT
    # The latest 64 KiB (EC2's Latest=true): where a first boot's result line is.
    (host / "boot.log").write_bytes(b"boot: x\n" + b"y" * CONSOLE_LIMIT + b"\nXCE-FIRST-BOOT {}\n")
    latest = console_output(tmp_path, "i-0123abcd", latest=True)
    assert latest is not None and latest.text.endswith("XCE-FIRST-BOOT {}\n") and len(latest.text) == CONSOLE_LIMIT
    assert console_output(tmp_path, "i-99") is None  # not booted
    assert console_output(tmp_path, "../hosts/i-0123abcd") is None  # not an instance id: names no directory
    (host / "boot.json").write_text(json.dumps({"instance_id": "i-other", "address": "10.213.0.7"}))
    assert console_output(tmp_path, "i-0123abcd") is None  # a directory of another instance says nothing


def _script(root: Path, name: str, body: str, mode: int = 0o755) -> Path:
    path = root / "var/lib/cloud/scripts/per-boot" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(mode)
    return path


def test_per_boot_scripts_run_in_name_order_at_every_boot_and_a_failure_is_recorded(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """cloud-init's scripts_per_boot: executable files only, in name order, output on the console;
    a failing one is an error of result.json and the boot goes on (later scripts, boot-finished)."""
    log = tmp_path / "ran"
    _script(tmp_path, "90-last", f"echo last >> {log}; echo 'hello from last'")
    _script(tmp_path, "10-first", f"echo first >> {log}; echo 'refused' >&2; exit 3")
    _script(tmp_path, "50-not-executable", f"echo never >> {log}", mode=0o644)
    (tmp_path / "var/lib/cloud/scripts/per-boot/60-a-directory").mkdir()

    result = run_cloud_init("", "i-1", tmp_path)
    out, err = capfd.readouterr()
    assert log.read_text() == "first\nlast\n"
    assert "hello from last" in out and "refused" in err
    assert result.errors == ["Runparts: 1 failures (10-first) in 2 attempted commands"]
    cloud = tmp_path / "var/lib/cloud"
    assert json.loads((cloud / "data/result.json").read_text())["v1"]["errors"] == result.errors
    assert (cloud / "instance/boot-finished").exists()

    # The next boot runs them again (per boot, not per instance).
    run_cloud_init("", "i-1", tmp_path)
    assert log.read_text() == "first\nlast\nfirst\nlast\n"


def test_no_per_boot_scripts_no_error_and_a_boots_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    assert run_cloud_init("", "i-1", tmp_path).errors == []
    monkeypatch.setenv("PYTHONPATH", "/the/host/managers/venv")
    _script(tmp_path, "50-ok", 'echo "path=${PYTHONPATH:-none} home=$HOME"')
    assert run_cloud_init("", "i-1", tmp_path).errors == []
    assert "path=none home=/root" in capfd.readouterr().out
