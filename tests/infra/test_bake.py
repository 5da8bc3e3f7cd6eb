"""A host the role ran on in bake mode (xce_node_manager_bake): what an image of it holds.

The node manager, its control script and the boot hook are installed; no configuration, CA or
join token is written; nothing runs, and nothing of the node manager's state or logs is left.
"""

from __future__ import annotations

from typing import Any

import pytest

HOOK = "/var/lib/cloud/scripts/per-boot/50-xce-node-manager"
CONTROL = "/opt/xce/sbin/xce-node-manager-service"


@pytest.fixture(autouse=True)
def _baked_hosts_only(baked: bool) -> None:
    if not baked:
        pytest.skip("not a baked host")


def test_node_manager_control_script_and_hook_installed(host: Any) -> None:
    exe = host.file("/opt/xce/bin/xce-node-manager")
    assert exe.exists and exe.is_file and exe.mode & 0o111
    assert host.file(CONTROL).mode & 0o111
    hook = host.file(HOOK)
    assert hook.is_file and hook.user == "root" and hook.mode == 0o755


def test_no_configuration_ca_or_token_written(host: Any) -> None:
    for path in ("/etc/xce/node-manager.json", "/etc/xce/ca.pem", "/etc/xce/join-token"):
        assert not host.file(path).exists, path
    assert not host.file("/var/lib/xce").exists and not host.file("/var/log/xce").exists


def test_nothing_runs_and_the_hook_stays_silent_without_a_configuration(host: Any) -> None:
    assert host.run(CONTROL + " status").rc == 3  # "not running"
    assert not [p for p in host.process.filter() if "xce-node-manager" in p.args]
    ran = host.run(HOOK)
    assert ran.rc == 0 and ran.stdout == "" and ran.stderr == ""
