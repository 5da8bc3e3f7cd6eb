"""Idle reclaim selection: idle past idle_time and older than hold_time, past max_lifetime, closed."""

from __future__ import annotations

from reconcile_support import FactLog, FakeClock, site

from orchestrator.clients.controller.types import HostInfo
from orchestrator.reconcile.ledger import ledger
from orchestrator.reconcile.reclaim import reclaim_candidates

SITE = """
policy: {lifetime_lead: 0s}
providers:
  sim: {module: xcesim, idle_time: 5m, hold_time: 1h}
  aged: {module: xcesim, idle_time: 5m, hold_time: 0s, max_lifetime: 2h}
templates:
  cpu:
    providers:
      sim: {flavor: c8, image: deb}
      aged: {flavor: c8, image: deb}
"""


def host(key: str, state: str, idle_since: float = 0.0, provider: str = "sim") -> HostInfo:
    return HostInfo(
        f"h-{key}", state, instance_id=f"i-{key}", instance_key=key, provider=provider, idle_since=idle_since
    )


def test_an_idle_host_is_chosen_once_idle_past_idle_time_and_older_than_hold_time() -> None:
    config, clock = site(SITE), FakeClock()
    log = FactLog(clock)
    [key] = log.intent("op-a", "sim", "cpu", 1)
    log.created(key, "sim", "cpu")
    launched = clock.now
    clock.advance(3000)
    idle = [host(key, "idle", idle_since=clock.now)]
    records = list(ledger(log.facts).values())
    clock.advance(299)
    assert reclaim_candidates(config, records, idle, clock.now) == []  # idle 299s < idle_time
    clock.advance(1)
    assert reclaim_candidates(config, records, idle, clock.now) == []  # 3300s old < hold_time
    clock.advance(300)
    [chosen] = reclaim_candidates(config, records, idle, clock.now)
    assert (chosen.key, chosen.reason, chosen.host_name, chosen.state) == (key, "idle", f"h-{key}", "idle")
    assert chosen.evidence["idle_for"] == 600 and chosen.evidence["hold_time"] == 3600
    assert chosen.to_json()["age"] == clock.now - launched
    assert chosen.to_json()["idle_since"] == idle[0].idle_since


def test_busy_closing_unknown_and_gone_hosts_are_not_chosen_for_idleness() -> None:
    config, clock = site(SITE), FakeClock()
    log = FactLog(clock)
    busy, closing, unknown, gone = log.intent("op-a", "sim", "cpu", 4)
    for key in (busy, closing, unknown, gone):
        log.created(key, "sim", "cpu")
    log.gone(gone, "sim", "cpu")
    clock.advance(7200)
    hosts = [host(busy, "busy"), host(closing, "closing"), host(gone, "idle", idle_since=clock.now - 3600)]
    assert reclaim_candidates(config, list(ledger(log.facts).values()), hosts, clock.now) == []


def test_a_closed_host_is_returned_whatever_its_age() -> None:
    config, clock = site(SITE), FakeClock()
    log = FactLog(clock)
    [key] = log.intent("op-a", "sim", "cpu", 1)
    log.created(key, "sim", "cpu")
    clock.advance(10)
    [chosen] = reclaim_candidates(config, list(ledger(log.facts).values()), [host(key, "closed")], clock.now)
    assert (chosen.reason, chosen.state) == ("closed", "closed")


def test_hosts_past_max_lifetime_are_chosen_even_when_busy_and_first() -> None:
    config, clock = site(SITE), FakeClock()
    log = FactLog(clock)
    [old] = log.intent("op-a", "aged", "cpu", 1)
    log.created(old, "aged", "cpu")
    [idle] = log.intent("op-b", "sim", "cpu", 1)
    log.created(idle, "sim", "cpu")
    clock.advance(7200)
    hosts = [host(old, "busy", provider="aged"), host(idle, "idle", idle_since=clock.now - 600)]
    chosen = reclaim_candidates(config, list(ledger(log.facts).values()), hosts, clock.now)
    assert [(c.key, c.reason, c.state) for c in chosen] == [(old, "lifetime", "busy"), (idle, "idle", "idle")]
    assert chosen[0].evidence["max_lifetime"] == 7200 and chosen[0].evidence["overdue"] is True


def test_a_host_is_found_by_instance_id_when_the_controller_lacks_its_key() -> None:
    config, clock = site(SITE), FakeClock()
    log = FactLog(clock)
    [key] = log.intent("op-a", "sim", "cpu", 1)
    log.created(key, "sim", "cpu")
    clock.advance(7200)
    by_id = HostInfo(f"h-{key}", "idle", instance_id=f"i-{key}", provider="sim", idle_since=clock.now - 600)
    [chosen] = reclaim_candidates(config, list(ledger(log.facts).values()), [by_id], clock.now)
    assert chosen.key == key


def test_a_host_started_from_the_warm_pool_is_held_from_its_start_not_its_launch() -> None:
    config, clock = site(SITE), FakeClock()
    log = FactLog(clock)
    [key] = log.pool("op-fill", "sim", "cpu", 1)
    clock.advance(7200)  # two hours stopped in the pool
    log.start("op-start", "sim", "cpu", [key])
    clock.advance(600)
    idle = [host(key, "idle", idle_since=clock.now - 300)]
    records = list(ledger(log.facts).values())
    assert reclaim_candidates(config, records, idle, clock.now) == []  # running 600s < hold_time 1h
    clock.advance(3000)
    [chosen] = reclaim_candidates(config, records, idle, clock.now)
    assert chosen.evidence["age"] == 3600
