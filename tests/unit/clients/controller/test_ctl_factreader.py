"""Facts read incrementally: only the new ones are asked for, and a full read when in doubt."""

from __future__ import annotations

from typing import Any, cast

from orchestrator.clients.controller.factreader import FactReader
from orchestrator.clients.controller.link import ControllerLink
from orchestrator.clients.controller.types import FactPage, LinkState
from orchestrator.model.facts import Epoch, Fact, FactKind

E = Epoch(1, 1)


class FakeLink:
    """A controller's fact log behind ``queryFacts``, recording every ``afterFactId`` asked."""

    def __init__(self) -> None:
        self.log: list[Fact] = []
        self.asked: list[int] = []
        self.term = 1
        self.ignores_after = False  # a controller that lists from the start whatever it is asked

    def add(self, *keys: str) -> None:
        for key in keys:
            self.log.append(
                Fact(FactKind.INSTANCE_CREATED, "sim", "op-1", E, instance_key=key, fact_id=len(self.log) + 1)
            )

    def state(self) -> LinkState:
        return LinkState(True, term=self.term, controller_id="ctl-a")

    def read_facts(self, provider: str, after: int = 0) -> FactPage:
        self.asked.append(after)
        facts = [f for f in self.log if f.provider == provider and (self.ignores_after or f.fact_id > after)]
        return FactPage(tuple(facts), facts[0].fact_id if facts else 0, facts[-1].fact_id if facts else 0)


def reader(link: FakeLink, now: list[float] | None = None) -> FactReader:
    clock = now if now is not None else [0.0]
    return FactReader(cast(ControllerLink, link), clock=lambda: clock[0])


def keys(facts: list[Fact]) -> list[str]:
    return [f.instance_key for f in facts]


def test_after_a_full_read_only_what_was_committed_since_is_asked_for() -> None:
    link = FakeLink()
    link.add("a", "b")
    facts = reader(link)
    assert keys(facts.facts("sim")) == ["a", "b"]
    link.add("c")  # committed by anyone: another holder, a command run elsewhere
    assert keys(facts.facts("sim")) == ["a", "b", "c"]
    assert keys(facts.facts("sim")) == ["a", "b", "c"]
    assert link.asked == [0, 2, 3] and facts.full_reads == 1


def test_a_new_term_reads_everything_again() -> None:
    link = FakeLink()
    link.add("a")
    facts = reader(link)
    facts.facts("sim")
    link.term = 2  # a failover or a restart: its ids are not trusted to follow ours
    link.add("b")
    assert keys(facts.facts("sim")) == ["a", "b"]
    assert link.asked == [0, 0] and facts.full_reads == 2


def test_an_answer_out_of_order_is_not_appended_but_read_again_whole() -> None:
    link = FakeLink()
    link.add("a", "b")
    facts = reader(link)
    facts.facts("sim")
    link.ignores_after = True
    link.add("c")
    # Appending the answer would have listed a and b twice: a full read replaces the copy.
    assert keys(facts.facts("sim")) == ["a", "b", "c"]
    assert facts.full_reads == 2


def test_every_full_every_seconds_a_full_read_is_made_anyway() -> None:
    link = FakeLink()
    link.add("a")
    now = [0.0]
    facts = reader(link, now)
    facts.facts("sim")
    now[0] = 599.0
    facts.facts("sim")
    now[0] = 600.0
    facts.facts("sim")
    assert link.asked == [0, 1, 0]


def test_callers_get_copies_they_may_keep() -> None:
    link = FakeLink()
    link.add("a")
    facts = reader(link)
    first: Any = facts.facts("sim")
    first.append("garbage")
    assert keys(facts.facts("sim")) == ["a"]
