"""``xceprov ops`` beside an applying op: the listing reports the busy shard instead of waiting for it."""

from __future__ import annotations

import threading

from tffake import FakeEngine, MemoryFacts, unit_executor

from orchestrator.configfile import LoadedConfig
from orchestrator.workspace.workdir import ProviderWorkdir


def test_a_shard_an_op_holds_is_reported_busy_and_its_listing_left_unread(
    loaded: LoadedConfig, engine: FakeEngine
) -> None:
    facts = MemoryFacts()
    executor = unit_executor(loaded, engine, facts=facts)
    made = executor.create("sim", "cpu", 1)
    shard: ProviderWorkdir = executor.workdir("sim")
    held, release = threading.Event(), threading.Event()

    def applying() -> None:  # another lock holder, as a daemon's apply is
        with shard.lock():
            held.set()
            release.wait(30)

    other = threading.Thread(target=applying)
    other.start()
    try:
        assert held.wait(10)
        found = executor.survey("sim", wait=0.2)
    finally:
        release.set()
        other.join()
    assert found.busy == [shard.path.name] and found.listing == "not read: an op is applying"
    assert found.open == [] and made.created  # the facts were still read
    assert "show_plan" not in [c for c, _ in engine.calls[-3:]]
    found = executor.survey("sim", wait=0.2)  # free again: read
    assert found.busy == [] and found.listing != "not read: an op is applying"
