"""Host keys: recorded on first contact or published by the instance, pinned per instance, strict, address reuse."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from orchestrator.clients.ansible.hostkeys import HostKeyStore, KeyTarget, Published
from orchestrator.model.published_keys import BEGIN, END


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


def _key(seed: int, keytype: str = "ssh-ed25519") -> str:
    """``"<type> <base64>"`` of a well-formed public key blob (no binaries needed)."""
    blob = b"".join(len(f).to_bytes(4, "big") + f for f in (keytype.encode(), bytes([seed]) * 32))
    return f"{keytype} {base64.b64encode(blob).decode()}"


def _console(*lines: str) -> str:
    return "\n".join(["boot: starting", BEGIN, *lines, END, "sshd: listening"]) + "\n"


class Consoles:
    """A key source over a dict ``instance id -> Published`` that counts its reads."""

    def __init__(self, published: dict[str, Published]) -> None:
        self.published = published
        self.reads = 0

    def publishes(self, target: KeyTarget) -> bool:
        return target.provider == "sim"

    def read(self, target: KeyTarget) -> Published | None:
        self.reads += 1
        return self.published.get(target.instance_id)


def test_a_published_key_is_pinned_with_no_scan(tmp_path: Path) -> None:
    scan = FakeScanner({"10.0.0.1": [_key(9)]})
    source = Consoles({"i-1": Published("i-1", "10.0.0.1", _console(_key(1) + " root@h1"))})
    store = HostKeyStore(tmp_path, scanner=scan)
    target = KeyTarget("h1", "i-1", "10.0.0.1", provider="sim")
    assert store.ensure([target], "record", wait=5, source=source, publish_wait=5) == {}
    assert scan.calls == []
    assert store.known_hosts.read_text() == f"10.0.0.1 {_key(1)}\n"  # the comment is not carried over
    assert store.recorded()["i-1"]["origin"] == "published"
    # strict takes a published key too: it was never learnt from whoever answered on the network
    strict = HostKeyStore(tmp_path / "strict", scanner=scan)
    assert strict.ensure([target], "strict", wait=5, source=source, publish_wait=5) == {}
    assert scan.calls == []


def test_a_host_that_publishes_nothing_in_time_is_scanned_or_under_strict_not_contacted(tmp_path: Path) -> None:
    scan = FakeScanner({"10.0.0.1": [_key(1)], "10.0.0.2": [_key(2)]})
    # i-1's console has no complete block (still booting); i-2 is of a provider with no console
    source = Consoles({"i-1": Published("i-1", "10.0.0.1", "boot: starting\n" + BEGIN + "\n" + _key(1) + "\n")})
    targets = [KeyTarget("h1", "i-1", "10.0.0.1", provider="sim"), KeyTarget("h2", "i-2", "10.0.0.2", provider="aws")]
    store = HostKeyStore(tmp_path, scanner=scan)
    assert store.ensure(targets, "record", wait=0, source=source, publish_wait=0.3) == {}
    assert sorted(scan.calls) == ["10.0.0.1", "10.0.0.2"] and source.reads >= 2
    assert {r["origin"] for r in store.recorded().values()} == {"scan"}
    scan.calls.clear()
    strict = HostKeyStore(tmp_path / "strict", scanner=scan)
    problems = strict.ensure(targets, "strict", wait=0, source=source, publish_wait=0.3)
    assert set(problems) == {"h1", "h2"} and "no recorded or published SSH host key" in problems["h1"]
    assert scan.calls == [] and strict.recorded() == {}


@pytest.mark.parametrize(
    ("published", "says"),
    [
        # a newline in a published value: a second line naming another host's address
        (Published("i-1", "10.0.0.1", _console(f"{_key(1)}\n10.0.0.9 {_key(7)}")), "'10.0.0.9' is not an SSH host key"),
        # a comma: a known_hosts pattern for every host
        (Published("i-1", "10.0.0.1", _console(f"10.0.0.1,* {_key(7)}")), "is not an SSH host key type"),
        (Published("i-1", "10.0.0.1", _console(f"{_key(1)} root@h1\x1b[2J")), "the comment is not printable"),
        (Published("i-1", "10.0.0.1", _console("ssh-ed25519 not*base64")), "the key is not base64"),
        (Published("i-1", "10.0.0.1", _console(f"ssh-rsa {_key(1).split()[1]}")), "not an ssh-rsa public key"),
        (Published("i-1", "10.0.0.1", _console()), "block is empty"),
        # the cloud's binding: the console of another instance, or for another address
        (Published("i-2", "10.0.0.1", _console(_key(7))), "the console of instance 'i-2'"),
        (Published("i-1", "10.0.0.9", _console(_key(7))), "published for address '10.0.0.9', not 10.0.0.1"),
    ],
)
def test_a_hostile_published_value_is_refused_in_one_line_and_nothing_is_recorded(
    tmp_path: Path, published: Published, says: str
) -> None:
    scan = FakeScanner({"10.0.0.1": [_key(1)]})
    store = HostKeyStore(tmp_path, scanner=scan)
    good = KeyTarget("good", "i-3", "10.0.0.3", provider="sim")
    source = Consoles({"i-1": published, "i-3": Published("i-3", "10.0.0.3", _console(_key(3)))})
    problems = store.ensure(
        [KeyTarget("h1", "i-1", "10.0.0.1", provider="sim"), good], "record", wait=5, source=source, publish_wait=5
    )
    assert set(problems) == {"h1"}
    assert says in problems["h1"] and "published SSH host key of instance i-1 refused" in problems["h1"]
    assert "\n" not in problems["h1"] and "\x1b" not in problems["h1"]
    assert scan.calls == []  # a tampered publication is not papered over by trusting the network
    assert set(store.recorded()) == {"i-3"}
    assert store.known_hosts.read_text() == f"10.0.0.3 {_key(3)}\n"


def test_a_published_key_other_than_the_pinned_one_is_refused(tmp_path: Path) -> None:
    scan = FakeScanner({"10.0.0.1": [_key(1)]})
    store = HostKeyStore(tmp_path, scanner=scan)
    store.ensure([KeyTarget("h1", "i-1", "10.0.0.1", provider="sim")], "record", wait=0)
    moved = KeyTarget("h1", "i-1", "10.0.0.5", provider="sim")
    source = Consoles({"i-1": Published("i-1", "10.0.0.5", _console(_key(7)))})
    problems = store.ensure([moved], "record", wait=0, source=source, publish_wait=5)
    assert "differs from the one recorded" in problems["h1"]
    assert store.recorded()["i-1"]["keys"] == [_key(1)]


def test_a_host_serving_another_key_than_the_published_one_is_named_as_such(tmp_path: Path) -> None:
    scan = FakeScanner({"10.0.0.1": [_key(7)], "10.0.0.2": [_key(2)]})
    store = HostKeyStore(tmp_path, scanner=scan)
    source = Consoles(
        {"i-1": Published("i-1", "10.0.0.1", _console(_key(1))), "i-2": Published("i-2", "10.0.0.2", _console(_key(2)))}
    )
    targets = [KeyTarget("h1", "i-1", "10.0.0.1", provider="sim"), KeyTarget("h2", "i-2", "10.0.0.2", provider="sim")]
    assert store.ensure(targets, "record", wait=0, source=source, publish_wait=5) == {}
    assert scan.calls == []
    reason = store.mismatch(targets[0])
    assert reason is not None and "is not the one instance i-1 published on its console" in reason
    assert store.mismatch(targets[1]) is None  # it serves what it published: its failure is something else
    assert store.mismatch(KeyTarget("h9", "i-9", "10.0.0.1")) is None  # nothing pinned for it
    assert store.recorded()["i-1"]["keys"] == [_key(1)]  # the served key is not learnt


def test_a_console_that_cannot_be_read_is_waited_for_then_scanned(tmp_path: Path) -> None:
    class Unreadable(Consoles):
        def read(self, target: KeyTarget) -> Published | None:
            self.reads += 1
            raise OSError("console gone")

    scan = FakeScanner({"10.0.0.1": [_key(1)]})
    store = HostKeyStore(tmp_path, scanner=scan)
    source = Unreadable({})
    target = KeyTarget("h1", "i-1", "10.0.0.1", provider="sim")
    assert store.ensure([target], "record", wait=0, source=source, publish_wait=0.3) == {}
    assert source.reads >= 1 and scan.calls == ["10.0.0.1"]


def test_a_scan_after_the_published_keys_wait_gets_only_what_is_left_of_the_ssh_wait(tmp_path: Path) -> None:
    """One bound for the whole key step: a host that publishes nothing and whose SSH never answers
    (a world without hosts) is scanned once after the console's wait, not for a second full wait,
    so a failed bootstrap (and a stop waiting for it) takes no longer than before."""
    scan = FakeScanner({})  # SSH never answers
    source = Consoles({})  # nothing published
    store = HostKeyStore(tmp_path, scanner=scan)
    problems = store.ensure(
        [KeyTarget("h1", "i-1", "10.0.0.1", provider="sim")], "record", wait=0.5, source=source, publish_wait=0.5
    )
    assert set(problems) == {"h1"} and "did not answer" in problems["h1"]
    assert scan.calls == ["10.0.0.1"] and store.recorded() == {}


def test_the_publish_wait_setting_unset_is_the_ssh_wait_and_zero_never_reads() -> None:
    from orchestrator.services.bootstrap import publish_wait

    assert publish_wait(None, 15.0) == 15.0 and publish_wait(None, 0.0) == 0.0  # read once, no wait
    assert publish_wait(0.0, 15.0) is None and publish_wait(40.0, 15.0) == 40.0
