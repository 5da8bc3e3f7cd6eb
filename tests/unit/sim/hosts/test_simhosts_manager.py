"""The host manager's reconcile logic, with hosts replaced by fakes (no namespaces, no root)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, ClassVar

import pytest

from orchestrator.sim.hosts import manager as mgr
from orchestrator.sim.hosts.host import HostSpec, hostname_for
from orchestrator.sim.hosts.lab import LabConfig
from orchestrator.sim.hosts.manager import SSH_DELAY_TAG, HostManager, InstanceView

LAB = LabConfig.parse("unit", "10.213.140.0/24")
EVENTS: list[tuple[str, str]] = []


class FakeHost:
    """Stands in for SimHost: records starts and stops, boots when told."""

    fail_start: ClassVar[set[str]] = set()

    def __init__(self, spec: HostSpec, lab: LabConfig, hosts_dir: Path, key: str, state_dir: Path) -> None:
        self.spec = spec
        self.dir = hosts_dir / spec.instance_id
        self.host_key = self.dir / "nokey"
        self.ready_after: float | None = None
        self.error = ""
        self.state = "booting"

    def start(self) -> None:
        if self.spec.instance_id in self.fail_start:
            raise OSError("no room")
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "boot.json").write_text("{}")
        EVENTS.append(("start", self.spec.instance_id))

    def poll(self) -> str:
        if self.state == "ready" and self.ready_after is None:
            self.ready_after = 0.1
        if self.state == "failed":
            self.error = "boot process exited with 1"
        return self.state

    def stop(self, *, remove_disk: bool) -> None:
        EVENTS.append(("stop-remove" if remove_disk else "stop-keep", self.spec.instance_id))
        if remove_disk:
            for f in self.dir.iterdir():
                f.unlink()
            self.dir.rmdir()

    def to_json(self, state: str) -> dict[str, Any]:
        return {
            "id": self.spec.instance_id,
            "name": self.spec.name,
            "address": self.spec.address,
            "state": state,
        }


class Source:
    def __init__(self) -> None:
        self.items: list[InstanceView] | None = []

    def instances(self) -> list[InstanceView] | None:
        return None if self.items is None else list(self.items)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[HostManager, Source, Clock]:
    EVENTS.clear()
    FakeHost.fail_start = set()
    monkeypatch.setattr(mgr, "SimHost", FakeHost)
    source, clock = Source(), Clock()
    manager = HostManager(tmp_path, LAB, source, retry_after=5.0, clock=clock)
    manager.hosts_dir.mkdir(parents=True)
    return manager, source, clock


def inst(n: int, state: str = "running", **kw: Any) -> InstanceView:
    return InstanceView(f"i-{n}", f"node-{n}", f"10.213.140.{n}", state, **kw)


def test_hosts_follow_running_instances(setup: tuple[HostManager, Source, Clock]) -> None:
    manager, source, _ = setup
    source.items = [inst(10), inst(11), inst(12, "stopped")]
    assert manager.reconcile_once()
    assert sorted(manager.hosts) == ["i-10", "i-11"]
    assert not manager.reconcile_once()  # nothing changed: nothing done
    source.items = [inst(10, "stopped"), inst(12)]  # 10 stopped, 11 terminated, 12 started
    manager.reconcile_once()
    assert ("stop-keep", "i-10") in EVENTS and ("stop-remove", "i-11") in EVENTS
    assert sorted(manager.hosts) == ["i-12"]
    assert (manager.hosts_dir / "i-10").exists() and not (manager.hosts_dir / "i-11").exists()


def test_teardown_comes_before_a_new_host_on_the_same_address(
    setup: tuple[HostManager, Source, Clock],
) -> None:
    manager, source, _ = setup
    source.items = [inst(10)]
    manager.reconcile_once()
    source.items = [InstanceView("i-new", "other", "10.213.140.10", "running")]
    manager.reconcile_once()
    assert EVENTS == [("start", "i-10"), ("stop-remove", "i-10"), ("start", "i-new")]


def test_unreadable_store_changes_nothing(setup: tuple[HostManager, Source, Clock]) -> None:
    manager, source, _ = setup
    source.items = [inst(10)]
    manager.reconcile_once()
    source.items = None
    manager.reconcile_once()
    assert list(manager.hosts) == ["i-10"] and EVENTS == [("start", "i-10")]


def test_addresses_outside_the_lab_are_skipped_with_a_reason(
    setup: tuple[HostManager, Source, Clock],
) -> None:
    manager, source, _ = setup
    source.items = [InstanceView("i-x", "x", "10.213.0.5", "running")]
    manager.reconcile_once()
    assert manager.hosts == {}
    assert "outside the lab subnet" in manager.skipped["i-x"]
    status = json.loads((manager.hosts_dir / "hosts.json").read_text())
    assert status["hosts"][0]["state"] == "skipped"


def test_failed_boot_is_torn_down_and_retried_with_backoff(setup: tuple[HostManager, Source, Clock]) -> None:
    manager, source, clock = setup
    source.items = [inst(10)]
    manager.reconcile_once()
    manager.hosts["i-10"].state = "failed"  # type: ignore[attr-defined]
    manager.reconcile_once()
    assert "i-10" not in manager.hosts and manager.failed["i-10"].attempts == 1
    manager.reconcile_once()
    assert "i-10" not in manager.hosts  # backoff
    clock.now += 5.1
    manager.reconcile_once()
    assert "i-10" in manager.hosts
    manager.hosts["i-10"].state = "failed"  # type: ignore[attr-defined]
    manager.reconcile_once()
    assert manager.failed["i-10"].attempts == 2
    clock.now += 5.1
    manager.reconcile_once()
    assert "i-10" not in manager.hosts  # the delay grows: 5 s per failed attempt
    clock.now += 5.1
    manager.reconcile_once()
    assert "i-10" in manager.hosts
    manager.hosts["i-10"].state = "ready"  # type: ignore[attr-defined]
    manager.reconcile_once()
    assert "i-10" not in manager.failed


def test_a_start_failure_does_not_stop_other_hosts(setup: tuple[HostManager, Source, Clock]) -> None:
    manager, source, _ = setup
    FakeHost.fail_start = {"i-10"}
    source.items = [inst(10), inst(11)]
    manager.reconcile_once()
    assert list(manager.hosts) == ["i-11"]
    assert manager.failed["i-10"].error == "no room"


def test_ssh_delay_tag(setup: tuple[HostManager, Source, Clock]) -> None:
    manager, source, _ = setup
    source.items = [inst(10, tags={SSH_DELAY_TAG: "3s"}), inst(11, tags={SSH_DELAY_TAG: "soon"})]
    manager.reconcile_once()
    assert manager.hosts["i-10"].spec.ssh_delay == 3.0
    assert manager.hosts["i-11"].spec.ssh_delay == 0.0  # a bad tag is logged, not fatal


def test_status_file_lists_hosts_and_known_hosts(setup: tuple[HostManager, Source, Clock]) -> None:
    manager, source, _ = setup
    source.items = [inst(10)]
    manager.reconcile_once()
    status = mgr.read_status(manager.state_dir)
    assert status is not None and status["running"] is True
    assert [h["id"] for h in status["hosts"]] == ["i-10"]
    assert status["lab"]["subnet"] == "10.213.140.0/24"
    assert (manager.state_dir / "hosts" / "known_hosts").exists()


def test_instance_names_become_safe_host_names(setup: tuple[HostManager, Source, Clock]) -> None:
    manager, source, _ = setup
    source.items = [InstanceView("i-10", "my node, #1", "10.213.140.10", "running")]
    manager.reconcile_once()
    assert manager.hosts["i-10"].spec.name == "my-node-1"
    assert not manager.reconcile_once()  # the cleaned name is not taken for a rename
    assert hostname_for("x" * 100) == "x" * 63
    assert hostname_for("___") == "host"


def test_preflight_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(mgr.HostsUnavailable, match="need root"):
        mgr.preflight()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda prog, path=None: None if prog == "sshd" else f"/bin/{prog}")
    with pytest.raises(mgr.HostsUnavailable, match="openssh-server"):
        mgr.preflight()
