"""A controller that pages facts without end, or speaks a newer protocol, at the frame.

Each test runs the real link against a TLS controller in the test (``ctlfake``) whose answers
break a rule: a ``queryFacts`` page that does not advance ``afterFactId``, endless pages, too
many facts, and enum values of a newer schema (``hostile.newer_schema``: one more fact kind,
host state and host-event kind, sent with their ordinals out of this version's range).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import hostile
import pytest
from ctlfake import FakeConn, FakeController, Pki, record_joins, wait_for

from orchestrator.clients.controller.factreader import FactReader
from orchestrator.clients.controller.link import MAX_FACT_PAGES, ControllerLink
from orchestrator.clients.controller.types import HostEvent
from orchestrator.daemon.metrics import DaemonMetrics
from orchestrator.errors import ControllerError, FinalError
from orchestrator.model.config import ControllerSettings
from orchestrator.model.facts import Epoch, Fact, FactKind
from tests.cli_run import xceprov

# Past this many queryFacts on one connection the fake hangs up: a link that loops is caught by a
# wrong error instead of a test that never ends.
RUNAWAY = 300


def settings(fake: FakeController, pki: Pki, **kw: Any) -> ControllerSettings:
    return ControllerSettings(addresses=[fake.address], ca=pki.ca, connect_timeout=2.0, request_timeout=5.0, **kw)


def fact(fact_id: int, kind: str = "instanceCreated") -> dict[str, Any]:
    return {
        "kind": kind,
        "provider": "sim",
        "opId": "op-1",
        "epoch": {"term": 1, "seq": 1},
        "instanceKey": f"op-1-{fact_id}",
        "factId": fact_id,
    }


def pages(fake: FakeController, page: Any) -> list[int]:
    """Answer queryFacts with ``page(afterFactId)`` (facts, more); the afterFactIds asked."""
    asked: list[int] = []

    def query(member: str, payload: Any, conn: FakeConn) -> tuple[str, Any] | str:
        after = int(payload.get("afterFactId", 0))
        asked.append(after)
        if len(asked) > RUNAWAY:
            return "drop"
        facts, more = page(after)
        return "factList", {"provider": "sim", "facts": facts, "more": more}

    fake.handlers["queryFacts"] = query
    return asked


def test_a_page_that_does_not_advance_fails_the_read_and_it_is_retried_with_backoff(
    fake: FakeController, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    # Every answer is fact 7 with "more": asking again from 7 gets fact 7 again.
    asked = pages(fake, lambda after: ([fact(7)], True))
    now = [0.0]
    with ControllerLink(settings(fake, pki), instance_id="a", providers=["sim"]) as link:
        link.open()
        reader = FactReader(link, clock=lambda: now[0])
        with caplog.at_level(logging.WARNING), pytest.raises(ControllerError, match="did not advance afterFactId"):
            reader.facts("sim")
        assert asked == [0, 7]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "\n" not in warnings[0]
        assert "queryFacts of provider sim: a page after fact 7 said more but did not advance" in warnings[0]
        assert "retrying in" in warnings[0]
        # Within the backoff the controller is not asked again; after it, it is.
        with pytest.raises(ControllerError, match="next try in"):
            reader.facts("sim")
        assert asked == [0, 7]
        now[0] = 10.0
        with pytest.raises(ControllerError, match="did not advance"):
            reader.facts("sim")
        assert asked == [0, 7, 0, 7]
        assert link.state().connected  # a failed read, not a dropped link


def test_endless_pages_fail_the_read_at_the_page_cap(fake: FakeController, pki: Pki) -> None:
    asked = pages(fake, lambda after: ([fact(after + 1)], True))  # one new fact per page, forever
    with ControllerLink(settings(fake, pki), instance_id="a", providers=["sim"]) as link:
        link.max_fact_pages = 40
        link.open()
        with pytest.raises(ControllerError, match="more than 40 pages in one read"):
            link.query_facts("sim")
        assert len(asked) == 40


def test_too_many_facts_fail_the_read_at_the_fact_cap(fake: FakeController, pki: Pki) -> None:
    asked = pages(fake, lambda after: ([fact(after + i) for i in range(1, 101)], True))
    # controller.max_facts_per_read: 1000, as a configuration file would set it.
    with ControllerLink(settings(fake, pki, max_facts_per_read=1000), instance_id="a", providers=["sim"]) as link:
        link.open()
        with pytest.raises(ControllerError, match="more than 1000 facts in one read"):
            link.query_facts("sim")
        # The 11th page passes the cap: nothing more is asked, nothing more is kept.
        assert len(asked) == 11


def test_paging_within_the_rules_reads_every_page(fake: FakeController, pki: Pki) -> None:
    asked = pages(fake, lambda after: ([fact(after + 1), fact(after + 2)], after < 8))
    with ControllerLink(settings(fake, pki), instance_id="a", providers=["sim"]) as link:
        link.open()
        assert [f.fact_id for f in link.query_facts("sim")] == list(range(1, 11))
        assert asked == [0, 2, 4, 6, 8]


def test_a_resync_the_controller_pages_without_end_is_retried_on_a_new_connection(
    fake: FakeController, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    joins = record_joins(fake)
    pages(fake, lambda after: ([fact(7)], True))
    with (
        caplog.at_level(logging.WARNING),
        ControllerLink(settings(fake, pki), instance_id="a", providers=["sim"]) as link,
    ):
        link.start()
        assert wait_for(lambda: len(joins) >= 2)
    failed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("resync after join failed")]
    assert failed and "did not advance afterFactId (last fact id 7); read failed; reconnecting" in failed[0]
    assert fake.seen.count("queryFacts") <= 2 * len(joins)  # two pages per connection, no loop


# -- a newer controller ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def newer(tmp_path_factory: pytest.TempPathFactory) -> Any:
    return hostile.newer_schema(tmp_path_factory.mktemp("newer"))


def newer_answer(newer: Any, member: str, payload: Any) -> Any:
    def answer(_member: str, _payload: Any, conn: FakeConn) -> None:
        hostile.send_newer(conn, newer, conn.request_id, member, payload)

    return answer


def unknown_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "unknown to this version" in r.getMessage()]


def test_a_fact_of_an_unknown_kind_is_skipped_with_one_warning_and_counted(
    fake: FakeController, pki: Pki, newer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    log = [fact(7, "requestIntent"), fact(8, "futureKind"), fact(9)]

    def query(member: str, payload: Any, conn: FakeConn) -> None:
        after = int(payload.get("afterFactId", 0))
        facts = [f for f in log if f["factId"] > after]
        hostile.send_newer(conn, newer, conn.request_id, "factList", {"provider": "sim", "facts": facts})

    fake.handlers["queryFacts"] = query
    metrics = DaemonMetrics()
    with (
        caplog.at_level(logging.WARNING),
        ControllerLink(settings(fake, pki), instance_id="a", providers=["sim"]) as link,
    ):
        link.on_unknown_value(metrics.unknown_value)
        link.open(resync=True)
        reader = FactReader(link)
        assert [f.fact_id for f in reader.facts("sim")] == [7, 9]
        assert [f.fact_id for f in link.facts("sim")] == [7, 9]  # the resync's copy too
        log.append(fact(10, "futureKind"))
        log.append(fact(11, "lost"))
        assert [f.fact_id for f in reader.facts("sim")] == [7, 9, 11]
        assert [f.fact_id for f in reader.facts("sim")] == [7, 9, 11]
        assert link.state().connected and link.state().reconnects == 0
    # Asked from the last id sent, skipped ones included: fact 8 was not asked for again.
    query_ids = fake.seen.count("queryFacts")
    assert query_ids == 4
    warnings = unknown_warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "sent Fact.kind value 8 in a factList message, unknown to this version: skipped" in warnings[0]
    assert "(1 such values in that message, 1 unknown values skipped so far)" in warnings[0]
    # The resync read fact 8, the reader's full read again, fact 10 once.
    assert link.unknown.total == 3
    assert metrics.registry.get_sample_value("xceprov_controller_unknown_values_total", {"field": "Fact.kind"}) == 3


def test_an_unknown_host_state_and_event_kind_are_skipped_and_the_link_stays(
    fake: FakeController, pki: Pki, newer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    conns = record_joins(fake)
    hosts = [{"hostName": "cpu-1", "state": "retired"}, {"hostName": "cpu-2", "state": "idle"}]
    fake.handlers["hostStatus"] = newer_answer(newer, "hostList", {"hosts": hosts})
    events: list[HostEvent] = []
    second = threading.Event()

    def on_event(event: HostEvent) -> None:
        events.append(event)
        second.set()

    metrics = DaemonMetrics()
    with (
        caplog.at_level(logging.WARNING),
        ControllerLink(settings(fake, pki), instance_id="a", providers=["sim"]) as link,
    ):
        link.on_unknown_value(metrics.unknown_value)
        link.on_host_event(on_event)
        link.open()
        assert [(h.host_name, h.state) for h in link.host_status()] == [("cpu-1", "unknown"), ("cpu-2", "idle")]
        hostile.send_newer(conns[0], newer, 0, "hostEvent", {"kind": "migrated", "host": {"hostName": "cpu-1"}})
        hostile.send_newer(conns[0], newer, 0, "hostEvent", {"kind": "idleSince", "host": {"hostName": "cpu-2"}})
        assert second.wait(10)
        assert [(e.kind, e.host.host_name) for e in events] == [("idleSince", "cpu-2")]
        assert link.state().connected and link.state().reconnects == 0
    warnings = unknown_warnings(caplog)
    assert len(warnings) == 2
    assert "HostInfo.state value 11 in a hostList message" in warnings[0]
    assert "HostEvent.kind value 9 in a hostEvent message" in warnings[1]
    sample = metrics.registry.get_sample_value
    assert sample("xceprov_controller_unknown_values_total", {"field": "HostInfo.state"}) == 1
    assert sample("xceprov_controller_unknown_values_total", {"field": "HostEvent.kind"}) == 1


def test_the_newer_schema_really_sends_ordinals_this_version_does_not_know(newer: Any, tmp_path: Path) -> None:
    # Guards the tests above: pycapnp of this version cannot name the value at all.
    from orchestrator.protocol import framing

    data = newer.Envelope.new_message(requestId=1, factList={"facts": [fact(8, "futureKind")]}).to_bytes()
    with framing.open_envelope(data) as env, pytest.raises(RuntimeError, match="Member was null"):
        str(env.factList.facts[0].kind)


def test_replies_with_values_a_newer_controller_knows_keep_the_link(
    fake: FakeController, pki: Pki, newer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fake.handlers["commitFact"] = newer_answer(newer, "reject", {"reason": "quotaExceeded", "message": "over quota"})
    fake.handlers["hostClose"] = newer_answer(newer, "ack", {"factId": 0, "hostState": "retired"})
    batch = [fact(8, "futureKind") | {"committedUnixMs": 5000}]
    fake.handlers["commitFacts"] = newer_answer(newer, "committed", {"facts": batch})
    epoch = Epoch(1, 1)
    with (
        caplog.at_level(logging.WARNING),
        ControllerLink(settings(fake, pki), instance_id="a", providers=["sim"]) as link,
    ):
        link.open()
        with pytest.raises(FinalError, match=r"rejected the requestIntent fact of provider sim: 3: over quota"):
            link.commit_fact(Fact(FactKind.REQUEST_INTENT, "sim", "op-1", epoch, count=1))
        assert link.close_host("sim", epoch, host_name="cpu-1") == "unknown"
        # The answer's kind is the controller's business: our fact is recorded with its id.
        assert link.commit_facts([Fact(FactKind.LOST, "sim", "op-1", epoch, instance_key="k")]) == [8]
        assert link.facts("sim")[-1].kind == FactKind.LOST and link.facts("sim")[-1].fact_id == 8
        assert link.state().connected and link.state().reconnects == 0
    fields = sorted(w.split(" sent ")[1].split(" value ")[0] for w in unknown_warnings(caplog))
    assert fields == ["Ack.hostState", "Fact.kind", "Reject.reason"]


def test_the_documented_caps_are_the_link_s() -> None:
    docs = Path(__file__).resolve().parents[4] / "docs"
    protocol, configuration = (docs / "protocol.md").read_text(), (docs / "configuration.md").read_text()
    default = ControllerSettings().max_facts_per_read
    assert f"| pages per fact read | {MAX_FACT_PAGES:,} `queryFacts` pages |" in protocol
    assert f"`controller.max_facts_per_read` (default {default:,} facts)" in protocol
    assert f"| `controller.max_facts_per_read` | ≥ 1000 | {default:,} |" in configuration


def test_a_fact_cap_below_its_minimum_is_refused_in_one_line_naming_the_key(tmp_path: Path) -> None:
    (tmp_path / "xceprov.yaml").write_text(
        "cluster: unit\n"
        'controller: {addresses: ["127.0.0.1:1"], ca: system, max_facts_per_read: 10}\n'
        "providers: {sim: {module: xcesim}}\n"
        "templates: {cpu: {providers: {sim: {flavor: c8.large, image: debian-12}}}}\n"
    )
    run = xceprov(tmp_path, "validate", timeout=120)
    assert run.returncode == 3
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "xceprov.yaml: controller.max_facts_per_read:" in lines[0] and "1000" in lines[0]
