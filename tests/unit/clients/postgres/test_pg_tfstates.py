"""Terraform's state rows, read by the PostgreSQL client: a row's text, nothing for a schema Terraform
has not made yet, and a server that is not there named in one retryable line without its password."""

from __future__ import annotations

import pytest

from orchestrator.clients.postgres import TerraformStates
from orchestrator.errors import RetryableError
from tests.unit.clients.postgres.pg_helpers import sql

NOWHERE = "postgresql://nobody:s3cr3t-pw@/xceprov?host=/nonexistent-xceprov-socket"


def test_the_row_terraform_keeps_is_read_and_a_schema_not_made_yet_is_no_state(conn_str: str) -> None:
    # The table as Terraform's pg backend makes it (name, data), in a schema per shard.
    sql(conn_str, "CREATE SCHEMA tf_c1_p1_0")
    sql(conn_str, "CREATE TABLE tf_c1_p1_0.states (id bigserial PRIMARY KEY, name text UNIQUE, data text)")
    sql(conn_str, "INSERT INTO tf_c1_p1_0.states (name, data) VALUES ('default', '{\"serial\": 3}')")
    sql(conn_str, "CREATE SCHEMA tf_c1_p1_1")
    sql(conn_str, "CREATE TABLE tf_c1_p1_1.states (id bigserial PRIMARY KEY, name text UNIQUE, data text)")
    states = TerraformStates(conn_str)
    try:
        assert states.state_text("tf_c1_p1_0", "shard 0") == '{"serial": 3}'
        assert states.state_text("tf_c1_p1_9", "shard 9") is None  # never initialised: no table
        assert states.state_text("tf_c1_p1_1", "shard 1") is None  # initialised, nothing applied
        assert states.state_text("tf_c1_p1_0", "shard 0") == '{"serial": 3}'  # the miss spoiled nothing
    finally:
        states.close()


def test_a_server_that_is_not_there_is_one_retryable_line_without_the_password() -> None:
    states = TerraformStates(NOWHERE, connect_timeout=1)
    with pytest.raises(RetryableError) as failed:
        states.state_text("tf_c1_p1_0", "shard 0")
    message = str(failed.value)
    assert message.startswith("PostgreSQL: cannot connect to read Terraform states: ")
    assert "s3cr3t-pw" not in message and "\n" not in message
