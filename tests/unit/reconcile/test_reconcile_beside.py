"""The watcher of leases gained during a pass (reconcile/beside.py): one resume per provider,
however often its lease is seen valid; none left running once the pass has finished it; each
outcome taken once."""

from __future__ import annotations

import threading
from collections import Counter

from orchestrator.reconcile.beside import BesideResumes, Resumed

BOUND = 30.0  # only reached when broken


def test_one_resume_per_provider_however_often_its_lease_is_seen_valid_and_finish_waits_for_it() -> None:
    looks: Counter[str] = Counter()
    looked_often, release = threading.Event(), threading.Event()
    resumed: list[str] = []

    def valid(provider: str) -> bool:
        looks[provider] += 1
        if looks["p2"] >= 5:
            looked_often.set()
        return provider == "p1"  # p2 stays another's: looked at again and again

    def resume(provider: str) -> tuple[str, bool]:
        resumed.append(provider)
        release.wait(BOUND)
        return f"resumed {provider}", True

    beside: BesideResumes[str] = BesideResumes(["p1", "p2"], valid, resume, lambda *why: repr(why), poll=0.001)
    beside.start()
    assert looked_often.wait(BOUND)  # p1's lease seen valid at every look while its resume runs
    assert resumed == ["p1"] and looks["p1"] == 1
    assert beside.collect() == []  # still running: nothing to take yet
    taken: list[Resumed[str]] = []
    finishing = threading.Thread(target=lambda: taken.extend(beside.finish()))
    finishing.start()
    finishing.join(0.2)
    assert finishing.is_alive()  # finish waits for the resume running
    release.set()
    finishing.join(BOUND)
    assert [(r.provider, r.outcome, r.joined) for r in taken] == [("p1", "resumed p1", True)]
    assert beside.collect() == [] and resumed == ["p1"]
