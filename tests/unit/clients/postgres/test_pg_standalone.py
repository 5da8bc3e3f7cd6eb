"""StandaloneLeases: the standalone fence as a lease row per provider, with an expiry and a grace.

Time passing is the row's ``expires_at`` moved back by SQL (no sleeping): what the server's
clock says decides who is admitted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from orchestrator.clients.postgres import SharedStore, StandaloneLeases
from orchestrator.errors import LeaseHeld, LeaseLost, StoreUnavailable
from orchestrator.model.facts import Epoch
from tests.pg_server import PgServer
from tests.unit.clients.postgres.pg_helpers import sql

NewLeases = Callable[[str], StandaloneLeases]


@pytest.fixture
def leases(conn_str: str) -> Iterator[NewLeases]:
    """Makes StandaloneLeases of a cluster on the test's database; all are closed after the test."""
    made: list[StandaloneLeases] = []

    def make(cluster: str) -> StandaloneLeases:
        made.append(StandaloneLeases(conn_str, cluster))
        return made[-1]

    yield make
    for one in made:
        one.close()


def run_out(conn_str: str, provider: str, seconds_ago: float) -> None:
    """As if the holder's lease had run out ``seconds_ago`` by the server's clock (no renewal since)."""
    sql(
        conn_str,
        "UPDATE xceprov.standalone_leases SET expires_at = clock_timestamp() - make_interval(secs => %s) "
        "WHERE provider = %s",
        (seconds_ago, provider),
    )


def test_a_successor_is_admitted_only_after_the_lease_and_its_grace_have_run_out(
    leases: NewLeases, conn_str: str
) -> None:
    first, second = leases("c1"), leases("c1")
    grant = first.take("p1", "cmd-a", ttl=15, grace=15)
    with pytest.raises(LeaseHeld, match=r"^provider p1: held by cmd-a, .*retry in (29|30)s$") as held:
        second.take("p1", "cmd-b", ttl=15, grace=15)
    assert held.value.holder == "cmd-a" and 25 < held.value.retry_after <= 30

    run_out(conn_str, "p1", 14)  # the lease ran out, the grace has not: still refused
    with pytest.raises(LeaseHeld, match="held by cmd-a"):
        second.take("p1", "cmd-b", ttl=15, grace=15)
    assert first.renew("p1", "cmd-a", grant, ttl=15)  # and the holder may still renew (no one took it)

    run_out(conn_str, "p1", 16)  # lease and grace over: admitted with a new grant number
    successor = second.take("p1", "cmd-b", ttl=15, grace=15)
    assert successor == grant + 1
    assert not first.renew("p1", "cmd-a", grant, ttl=15)  # the old holder's renewal finds it gone
    first.release("p1", "cmd-a", grant)  # and its release leaves the successor's grant alone
    with pytest.raises(LeaseHeld, match="held by cmd-b"):
        first.take("p1", "cmd-a", ttl=15, grace=15)


def test_a_release_admits_the_next_at_once_and_providers_and_clusters_are_apart(leases: NewLeases) -> None:
    first, second, other = leases("c1"), leases("c1"), leases("c2")
    grant = first.take("p1", "cmd-a", ttl=15, grace=15)
    assert second.take("p2", "cmd-b", ttl=15, grace=15) == 1  # another provider
    assert other.take("p1", "cmd-c", ttl=15, grace=15) == 1  # another cluster
    first.release("p1", "cmd-a", grant)
    assert second.take("p1", "cmd-b", ttl=15, grace=15) == grant + 1


def test_the_row_survives_a_database_restart(leases: NewLeases, server: PgServer) -> None:
    """The advisory lock this replaces died with the server's session: a restart let anyone in."""
    first, second = leases("c1"), leases("c1")
    grant = first.take("p1", "cmd-a", ttl=15, grace=15)
    server.stop()
    server.start()
    with pytest.raises(LeaseHeld, match="held by cmd-a"):
        second.take("p1", "cmd-b", ttl=15, grace=15)
    # The holder's connection died with the restart: its next try reconnects and renews.
    with contextlib.suppress(StoreUnavailable):
        first.renew("p1", "cmd-a", grant, ttl=15)
    assert first.renew("p1", "cmd-a", grant, ttl=15)


def test_a_live_daemon_holding_the_provider_refuses_a_standalone_command(
    leases: NewLeases, store: SharedStore, conn_str: str
) -> None:
    store.heartbeat("inst-9", "c1-daemon-node9", ["p1", "p2"], {"p1": "4.2"}, live_for=10)
    with pytest.raises(LeaseHeld) as held:
        leases("c1").take("p1", "cmd-a", ttl=15, grace=15)
    [line] = str(held.value).splitlines()
    assert line.startswith("provider p1: held by daemon c1-daemon-node9 (inst-9), which holds it under")
    assert "epoch 4.2" in line and "nothing was changed" in line
    assert "-daemon-" in held.value.holder
    assert leases("c1").take("p2", "cmd-a", ttl=15, grace=15) == 1  # it holds p2 not: p2 is free

    # Past its live window plus the grace (a daemon that stopped heartbeating has long closed its
    # fence), the row no longer keeps the provider.
    sql(conn_str, "UPDATE xceprov.members SET heartbeat_at = clock_timestamp() - interval '26 seconds'")
    assert leases("c1").take("p1", "cmd-a", ttl=15, grace=15) == 1


def test_a_fence_carrying_a_controller_epoch_refuses_a_standalone_command(
    leases: NewLeases, store: SharedStore
) -> None:
    store.write_document("p1", "desired/0", b"{}", Epoch(4, 2))  # a daemon wrote under its lease
    with pytest.raises(LeaseHeld, match=r"^provider p1: held by the controller's lease holder, .*epoch 4\.2"):
        leases("c1").take("p1", "cmd-a", ttl=15, grace=15)
    store.write_document("p2", "desired/0", b"{}", None)  # an unfenced write leaves no epoch
    assert leases("c1").take("p2", "cmd-a", ttl=15, grace=15) == 1


def test_a_write_under_a_controller_epoch_is_refused_while_a_standalone_command_holds_the_provider(
    leases: NewLeases, store: SharedStore, conn_str: str
) -> None:
    standalone = leases("c1")
    grant = standalone.take("p1", "cmd-a", ttl=15, grace=15)
    with pytest.raises(LeaseLost, match=r"^provider p1: the standalone command cmd-a holds it"):
        store.write_document("p1", "desired/0", b"daemon", Epoch(4, 2))
    assert store.read_document("p1", "desired/0") is None
    standalone.release("p1", "cmd-a", grant)
    store.write_document("p1", "desired/0", b"daemon", Epoch(4, 2))
    assert store.read_document("p1", "desired/0") == b"daemon"


def test_check_refuses_as_take_would_and_takes_nothing(leases: NewLeases, store: SharedStore) -> None:
    first, second = leases("c1"), leases("c1")
    second.check("p1", grace=15)  # free: no refusal, and nothing taken
    grant = first.take("p1", "cmd-a", ttl=15, grace=15)
    assert grant == 1
    with pytest.raises(LeaseHeld, match="held by cmd-a"):
        second.check("p1", grace=15)
    store.heartbeat("inst-9", "c1-daemon-node9", ["p2"], {"p2": "4.2"}, live_for=10)
    with pytest.raises(LeaseHeld, match="held by daemon c1-daemon-node9"):
        second.check("p2", grace=15)


def test_a_hand_over_lifts_the_controller_epoch_until_a_newer_one_writes(
    leases: NewLeases, store: SharedStore, conn_str: str
) -> None:
    rows = leases("c1")
    assert rows.hand_over("p1", grace=15) is None  # nothing written under a controller: nothing to lift
    store.write_document("p1", "desired/0", b"{}", Epoch(4, 2))
    store.heartbeat("inst-9", "c1-daemon-node9", ["p1"], {"p1": "4.2"}, live_for=10)
    with pytest.raises(LeaseHeld, match="held by daemon c1-daemon-node9"):  # a live daemon: never
        rows.hand_over("p1", grace=15)
    store.leave("inst-9")
    assert rows.hand_over("p1", grace=15) == "4.2"
    grant = rows.take("p1", "cmd-a", ttl=15, grace=15)
    rows.release("p1", "cmd-a", grant)

    store.write_document("p1", "desired/0", b"{}", Epoch(5, 1))  # the controller came back, wrote again
    with pytest.raises(LeaseHeld, match=r"epoch 5\.1"):
        rows.take("p1", "cmd-a", ttl=15, grace=15)
