"""A connection option libpq refuses is final; the schema version is read without changing anything."""

from __future__ import annotations

import pytest

from orchestrator.clients.postgres import SharedStore, check_schema, unreachable
from orchestrator.clients.postgres.migrations import LATEST
from orchestrator.clients.postgres.session import connect
from orchestrator.errors import FinalError, StoreUnavailable
from tests.unit.clients.postgres.pg_helpers import sql

NOWHERE = "postgresql:///xceprov?host=/nonexistent-xceprov-socket&user=nobody"


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ("sslmode=bogus", 'invalid sslmode value: "bogus"'),
        ("gssencmode=sometimes", "gssencmode"),
        ("target_session_attrs=anything", "target_session_attrs"),
        ("port=abc", '"port"'),
    ],
)
def test_an_option_value_libpq_refuses_is_final_and_named(option: str, named: str) -> None:
    """Retrying the same string meets the same refusal: no daemon may wait for it for ever (exit 1)."""
    with pytest.raises(FinalError) as refused:
        SharedStore.open(f"{NOWHERE}&{option}", "c1", connect_timeout=1)
    assert not isinstance(refused.value, StoreUnavailable)
    assert refused.value.exit_code == 1 and named in str(refused.value) and "\n" not in str(refused.value)
    assert unreachable(f"{NOWHERE}&{option}", connect_timeout=1) is None  # refused, not away


def test_a_server_that_is_not_there_stays_retryable() -> None:
    with pytest.raises(StoreUnavailable):
        connect(f"{NOWHERE}&sslmode=disable", 1, 1)
    assert unreachable(NOWHERE, connect_timeout=1) is not None


def test_the_schema_version_is_read_only_and_a_newer_one_refused(conn_str: str) -> None:
    assert check_schema(conn_str) == 0
    assert sql(conn_str, "SELECT to_regnamespace('xceprov') IS NULL") == [(True,)]  # nothing made
    SharedStore.open(conn_str, "c1").close()
    assert check_schema(conn_str) == LATEST
    sql(conn_str, "INSERT INTO xceprov.migrations (version, name) VALUES (%s, 'from the future')", (LATEST + 1,))
    with pytest.raises(FinalError) as refused:
        check_schema(conn_str)
    assert f"version {LATEST + 1}" in str(refused.value) and "upgrade the toolkit" in str(refused.value)
