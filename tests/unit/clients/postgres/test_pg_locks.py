"""ProviderLocks: the standalone fence with the pg backend, one advisory lock per provider."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from orchestrator.clients.postgres import ProviderLocks
from tests.unit.clients.postgres.pg_helpers import sql, wait_until_no_advisory_lock

NewLocks = Callable[[str], ProviderLocks]


@pytest.fixture
def new_locks(conn_str: str) -> Iterator[NewLocks]:
    """Makes ProviderLocks of a cluster on the test's database; all are closed after the test."""
    made: list[ProviderLocks] = []

    def make(cluster: str) -> ProviderLocks:
        made.append(ProviderLocks(conn_str, cluster))
        return made[-1]

    yield make
    for locks in made:
        locks.close()


def test_a_provider_locked_by_one_instance_is_refused_to_another_until_it_closes(new_locks: NewLocks) -> None:
    first, second = new_locks("c1"), new_locks("c1")
    assert first.try_lock("p1") is True
    assert first.try_lock("p1") is True  # already ours
    assert second.try_lock("p1") is False
    assert second.try_lock("p2") is True  # another provider is another lock
    assert first.try_lock("p2") is False
    assert [first.holds("p1"), first.holds("p2")] == [True, False]
    assert [second.holds("p1"), second.holds("p2")] == [False, True]
    first.close()
    assert first.holds("p1") is False
    assert second.try_lock("p1") is True


def test_unlock_releases_one_provider(new_locks: NewLocks) -> None:
    first, second = new_locks("c1"), new_locks("c1")
    assert first.try_lock("p1") and first.try_lock("p1") and first.try_lock("p2")
    first.unlock("p1")  # once is enough, however often it was asked for
    assert first.holds("p1") is False and first.holds("p2") is True
    assert second.try_lock("p1") is True
    assert second.try_lock("p2") is False


def test_locks_of_two_clusters_never_collide(new_locks: NewLocks) -> None:
    assert new_locks("c1").try_lock("p1") is True
    assert new_locks("c2").try_lock("p1") is True


def test_a_lock_dies_with_its_connection(new_locks: NewLocks, conn_str: str) -> None:
    first, second = new_locks("c1"), new_locks("c1")
    assert first.try_lock("p1") is True and first.alive() is True
    # The server ends the session (as after a network cut the server noticed): the lock is gone.
    sql(conn_str, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'")
    wait_until_no_advisory_lock(conn_str)
    assert first.alive() is False
    assert first.holds("p1") is False
    assert second.try_lock("p1") is True
    assert first.try_lock("p1") is False  # a new connection, and the lock is the other's now


def test_alive_is_false_before_any_lock_was_asked_for(new_locks: NewLocks) -> None:
    locks = new_locks("c1")
    assert locks.alive() is False and locks.holds("p1") is False
