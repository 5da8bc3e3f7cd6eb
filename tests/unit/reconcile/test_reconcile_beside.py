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


def test_no_more_resumes_run_at_once_than_the_limit_the_next_starts_when_one_ends() -> None:
    started: list[str] = []
    first_running, release = threading.Event(), threading.Event()

    def resume(provider: str) -> tuple[str, bool]:
        started.append(provider)
        first_running.set()
        release.wait(BOUND)
        return f"resumed {provider}", True

    beside: BesideResumes[str] = BesideResumes(
        ["p1", "p2", "p3"], lambda _p: True, resume, lambda *why: repr(why), poll=0.001, limit=1
    )
    beside.start()
    assert first_running.wait(BOUND)
    waiting = threading.Event()
    waiting.wait(0.3)  # time enough for the other two to have started, were they not capped
    assert len(started) == 1  # the three leases are all valid: two wait for the one running
    release.set()
    taken = beside.finish()
    assert sorted(r.provider for r in taken) == ["p1", "p2", "p3"] and len(started) == 3
