"""Host keys: recorded on first contact, pinned per instance, strict policy, address reuse."""

from __future__ import annotations

from pathlib import Path

from orchestrator.clients.ansible.hostkeys import HostKeyStore, KeyTarget


class FakeScanner:
    def __init__(self, keys: dict[str, list[str]]) -> None:
        self.keys = keys
        self.calls: list[str] = []

    def __call__(self, address: str, port: int, timeout: float) -> list[str]:
        self.calls.append(address)
        return self.keys.get(address, [])


def test_record_then_pinned(tmp_path: Path) -> None:
    scan = FakeScanner({"10.0.0.1": ["ssh-ed25519 AAAA1"], "10.0.0.2": ["ssh-ed25519 AAAA2"]})
    store = HostKeyStore(tmp_path, scanner=scan)
    targets = [KeyTarget("h1", "i-1", "10.0.0.1"), KeyTarget("h2", "i-2", "10.0.0.2", 2200)]
    assert store.ensure(targets, "record", wait=0) == {}
    assert store.known_hosts.read_text().splitlines() == [
        "10.0.0.1 ssh-ed25519 AAAA1",
        "[10.0.0.2]:2200 ssh-ed25519 AAAA2",
    ]
    scan.calls.clear()
    assert store.ensure(targets, "record", wait=0) == {}
    assert scan.calls == []  # pinned: never re-learnt


def test_silent_host_is_reported_not_recorded(tmp_path: Path) -> None:
    store = HostKeyStore(tmp_path, scanner=FakeScanner({}))
    problems = store.ensure([KeyTarget("ghost", "i-9", "10.0.0.9")], "record", wait=0)
    assert "did not answer" in problems["ghost"]
    assert store.recorded() == {}


def test_strict_needs_a_recorded_key(tmp_path: Path) -> None:
    scan = FakeScanner({"10.0.0.1": ["ssh-ed25519 AAAA1"]})
    store = HostKeyStore(tmp_path, scanner=scan)
    problems = store.ensure([KeyTarget("h1", "i-1", "10.0.0.1")], "strict", wait=0)
    assert "strict" in problems["h1"] and scan.calls == []


def test_new_instance_on_a_reused_address_replaces_the_old_keys(tmp_path: Path) -> None:
    scan = FakeScanner({"10.0.0.1": ["ssh-ed25519 OLD"]})
    store = HostKeyStore(tmp_path, scanner=scan)
    store.ensure([KeyTarget("h1", "i-1", "10.0.0.1")], "record", wait=0)
    scan.keys["10.0.0.1"] = ["ssh-ed25519 NEW"]
    assert store.ensure([KeyTarget("h9", "i-9", "10.0.0.1")], "record", wait=0) == {}
    assert set(store.recorded()) == {"i-9"}
    assert store.known_hosts.read_text() == "10.0.0.1 ssh-ed25519 NEW\n"


def test_same_instance_with_another_key_is_refused(tmp_path: Path) -> None:
    scan = FakeScanner({"10.0.0.1": ["ssh-ed25519 OLD"]})
    store = HostKeyStore(tmp_path, scanner=scan)
    store.ensure([KeyTarget("h1", "i-1", "10.0.0.1")], "record", wait=0)
    scan.keys["10.0.0.5"] = ["ssh-ed25519 EVIL"]
    problems = store.ensure([KeyTarget("h1", "i-1", "10.0.0.5")], "record", wait=0)
    assert "differs" in problems["h1"]
    assert store.recorded()["i-1"]["keys"] == ["ssh-ed25519 OLD"]


def test_an_address_that_is_not_one_is_never_scanned_nor_written(tmp_path: Path) -> None:
    """``10.0.0.5,*`` would make ssh-keyscan scan 10.0.0.5 and known_hosts pin its key for every
    host; a newline would add a line of its own. Both are that host's problem, and the others go on."""
    scan = FakeScanner({"10.0.0.1": ["ssh-ed25519 GOOD"], "10.0.0.5": ["ssh-ed25519 ATTACKER"]})
    store = HostKeyStore(tmp_path, scanner=scan)
    targets = [
        KeyTarget("good", "i-1", "10.0.0.1"),
        KeyTarget("comma", "i-5", "10.0.0.5,*"),
        KeyTarget("newline", "i-6", "10.0.0.5\n* ssh-ed25519 ATTACKER"),
    ]
    problems = store.ensure(targets, "record", wait=0)
    assert set(problems) == {"comma", "newline"}
    assert "'10.0.0.5,*'" in problems["comma"] and "neither an IP address nor a host name" in problems["comma"]
    assert scan.calls == ["10.0.0.1"]
    assert store.known_hosts.read_text() == "10.0.0.1 ssh-ed25519 GOOD\n"


def test_a_record_written_before_addresses_were_checked_writes_no_pattern(tmp_path: Path) -> None:
    (tmp_path / "host_keys.json").write_text(
        '{"i-5": {"address": "10.0.0.5,*", "port": 22, "keys": ["ssh-ed25519 ATTACKER"], "name": "x"}}'
    )
    store = HostKeyStore(tmp_path, scanner=FakeScanner({"10.0.0.1": ["ssh-ed25519 GOOD"]}))
    assert store.ensure([KeyTarget("good", "i-1", "10.0.0.1")], "record", wait=0) == {}
    assert store.known_hosts.read_text() == "10.0.0.1 ssh-ed25519 GOOD\n"
