"""A bootstrapped host: node manager installed, its configuration, its process, the worker joined.

The same checks hold on a host started from a baked image after a push pass (molecule/bake);
a baked host itself (bake mode: no configuration, nothing running) is checked by test_bake.py.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

CONFIG = "/etc/xce/node-manager.json"
CONTROL = "/opt/xce/sbin/xce-node-manager-service"


@pytest.fixture(autouse=True)
def _pushed_hosts_only(baked: bool) -> None:
    if baked:
        pytest.skip("a baked host has no configuration and runs nothing (test_bake.py)")


def test_node_manager_installed(host: Any) -> None:
    exe = host.file("/opt/xce/bin/xce-node-manager")
    assert exe.exists and exe.is_file and exe.mode & 0o111
    assert host.file(CONTROL).mode & 0o111


def test_configuration_declares_the_worker_role(host: Any) -> None:
    f = host.file(CONFIG)
    assert f.exists and f.user == "root" and f.mode == 0o640
    cfg = json.loads(f.content_string)
    assert cfg["roles"] == ["worker"]
    assert cfg["controller"]["addresses"] and all(":" in a for a in cfg["controller"]["addresses"])
    assert cfg["controller"]["ca_file"] == "/etc/xce/ca.pem" and host.file("/etc/xce/ca.pem").exists
    assert cfg["template"] and cfg["instance_id"]
    assert cfg["host_name"] == host.backend.get_hostname()


def test_node_manager_and_worker_running(host: Any) -> None:
    assert host.run(CONTROL + " status").rc == 0
    pidfile = host.file("/run/xce-node-manager.pid.child")
    assert pidfile.exists
    manager = host.process.get(pid=int(pidfile.content_string.strip()))
    assert "xce-node-manager" in manager.args
    # The node manager runs the worker role as its child.
    workers = [p for p in host.process.filter(ppid=manager.pid) if "worker" in p.args]
    assert workers, "the node manager runs no worker"


@pytest.mark.skipif(not os.environ.get("XCE_EXPECT_JOIN"), reason="no simulated controller in this scenario")
def test_worker_joined_the_controller(host: Any) -> None:
    log = host.file("/var/log/xce/node-manager.log").content_string
    assert "joined controller" in log
