"""First-boot outcomes read from consoles through the provider module's reader, bounded.

What a user would notice: the outcome each host not joined gets (failed at a step, started,
unreadable, no result yet), that a console the cloud binds to another instance is never taken
for the host's, that a slow or failing console API never holds the caller past its budget nor
loses what was read before, and that consoles are not read again and again within ``reread``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

from orchestrator.configfile import parse_config
from orchestrator.model.bootresult import MARKER, FirstBootKind
from orchestrator.model.config import Config
from orchestrator.model.modules import MODULES
from orchestrator.ops.consoleresults import Console, ConsoleResults
from orchestrator.ops.executor import Created

SITE = """
cluster: unit
controller: {ca: system, join_key: join.key}
providers:
  sim: {module: xcesim, max_instances: 10}
  cloud: {module: aws, max_instances: 10}
templates:
  # The reader does not look at the mode (the flow asks it about first-boot hosts only); aws
  # cannot serve a first-boot template (no join tokens), but its console API is still described.
  cpu:
    providers:
      sim: {flavor: c8.large, image: debian-12}
      cloud: {flavor: m5.large, image: ami-1}
"""


def config() -> Config:
    return parse_config(SITE, "site.yaml", Path("/")).config


def host(n: int) -> Created:
    return Created(f"op-1-{n:03d}", f"i-{n:012x}", f"cpu-{n}", f"10.0.0.{n}", "cpu", 0.0)


FAILED = MARKER + json.dumps({"v": 1, "outcome": "failed", "step": "join", "message": "token refused"})
STARTED = MARKER + json.dumps({"v": 1, "outcome": "started"})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Consoles:
    """The cloud's consoles by instance id; counts reads."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts
        self.reads: list[str] = []

    def __call__(self, config: Config, provider: str, instance_id: str) -> Console | None:
        assert provider == "sim"
        self.reads.append(instance_id)
        text = self.texts.get(instance_id)
        n = int(instance_id[2:], 16)
        return None if text is None else Console(instance_id, f"10.0.0.{n}", text)


def test_each_host_gets_the_outcome_its_console_shows() -> None:
    consoles = Consoles({host(1).instance_id: "boot\n" + FAILED + "\n", host(2).instance_id: STARTED})
    results = ConsoleResults(config, {"xcesim": consoles})
    out = results("sim", [host(1), host(2), host(3)])
    assert out[host(1).key].line() == "failed at step join: token refused"
    assert out[host(2).key].kind == FirstBootKind.STARTED
    assert out[host(3).key].kind == FirstBootKind.NO_RESULT
    assert sorted(consoles.reads) == sorted(h.instance_id for h in (host(1), host(2), host(3)))


def test_a_module_whose_console_is_not_built_in_reads_nothing() -> None:
    consoles = Consoles({})
    out = ConsoleResults(config, {"xcesim": consoles})("cloud", [host(1)])
    assert out[host(1).key].kind == FirstBootKind.NO_RESULT
    assert "module aws is not read" in out[host(1).key].line()
    assert consoles.reads == []
    # The registry says which API each module's cloud serves its console through (documented).
    assert MODULES["aws"].console is not None and "GetConsoleOutput" in MODULES["aws"].console.call
    assert MODULES["openstack"].console is not None and "os-getConsoleOutput" in MODULES["openstack"].console.call
    assert MODULES["xcesim"].console is not None and MODULES["xcesim"].console.built_in


def test_a_console_bound_to_another_instance_or_address_is_not_the_hosts() -> None:
    def other(config: Config, provider: str, instance_id: str) -> Console:
        if instance_id == host(1).instance_id:
            return Console("i-ffffffffffff", "10.0.0.1", FAILED)
        return Console(instance_id, "10.9.9.9", FAILED)

    out = ConsoleResults(config, {"xcesim": other})("sim", [host(1), host(2)])
    assert out[host(1).key].kind == FirstBootKind.UNREADABLE
    assert "console of instance i-ffffffffffff" in out[host(1).key].message
    assert out[host(2).key].kind == FirstBootKind.UNREADABLE
    assert "address 10.9.9.9" in out[host(2).key].message


def test_a_host_is_not_read_again_before_reread_and_at_most_max_hosts_per_call() -> None:
    clock = Clock()
    consoles = Consoles({host(n).instance_id: STARTED for n in range(1, 6)})
    results = ConsoleResults(config, {"xcesim": consoles}, reread=10.0, max_hosts=3, monotonic=clock)
    hosts = [host(n) for n in range(1, 6)]
    first = results("sim", hosts)
    assert len(consoles.reads) == 3
    assert sum(o.kind == FirstBootKind.STARTED for o in first.values()) == 3
    results("sim", hosts)  # the two never read come first; the three just read wait for reread
    assert len(consoles.reads) == 5 and len(set(consoles.reads)) == 5
    consoles.reads.clear()
    results("sim", hosts)
    assert consoles.reads == []  # every host read within the last 10 s
    clock.now += 10
    assert len(results("sim", hosts)) == 5 and len(consoles.reads) == 3


def test_a_slow_or_failing_read_keeps_the_last_outcome_and_does_not_hold_the_caller() -> None:
    clock = Clock()
    release = threading.Event()
    state = {"mode": "ok"}

    def read(config: Config, provider: str, instance_id: str) -> Console:
        if state["mode"] == "hang" and instance_id == host(1).instance_id:
            release.wait(30)
        if state["mode"] == "raise":
            raise OSError("console API throttled")
        return Console(instance_id, f"10.0.0.{int(instance_id[2:], 16)}", STARTED)

    results = ConsoleResults(config, {"xcesim": read}, budget=0.2, reread=0.0, monotonic=clock)
    assert results("sim", [host(1), host(2)])[host(1).key].kind == FirstBootKind.STARTED
    state["mode"] = "hang"
    try:
        out = results("sim", [host(1), host(2)])
        assert out[host(1).key].kind == FirstBootKind.STARTED  # not read in time: the last outcome
        assert out[host(2).key].kind == FirstBootKind.STARTED
    finally:
        release.set()
    state["mode"] = "raise"
    out = results("sim", [host(1), host(2)])
    assert {o.kind for o in out.values()} == {FirstBootKind.STARTED}


def test_the_documented_bounds() -> None:
    # docs/bootstrap.md, "Results without SSH": each host at most every 10 s, at most 200 per
    # call, a call waits at most 10 s for its reads; 64 KiB of the console's end.
    results = ConsoleResults(config, {})
    assert (results.reread, results.max_hosts, results.budget) == (10.0, 200, 10.0)
    assert MODULES["xcesim"].console is not None and MODULES["xcesim"].console.limit == 64 * 1024


def test_hosts_no_longer_asked_about_are_forgotten() -> None:
    clock = Clock()
    consoles = Consoles({host(1).instance_id: STARTED})
    results = ConsoleResults(config, {"xcesim": consoles}, reread=10.0, monotonic=clock)
    results("sim", [host(1)])
    results("sim", [host(2)])  # host 1 joined or went: its record is dropped
    results("sim", [host(1)])  # asked about again: read again at once
    assert consoles.reads.count(host(1).instance_id) == 2
