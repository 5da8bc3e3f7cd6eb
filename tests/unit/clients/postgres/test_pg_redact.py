"""redact(): no connection string and no password in a message, whatever form it was written in."""

from __future__ import annotations

import pytest

from orchestrator.clients.postgres import redact


@pytest.mark.parametrize(
    ("conn_str", "secret"),
    [
        ("host=db1 user=xce password=s3cr3t dbname=x", "s3cr3t"),
        ("host=db1 password = 'two words\\'q' dbname=x", "two words'q"),
        ("postgresql://xce:s3cr3t@db1:5432/x?sslmode=require", "s3cr3t"),
        ("postgres://:onlypass@db1/x", "onlypass"),
        ("postgresql:///x?host=/run/pg&password=q%40ery&user=xce", "q@ery"),
        ("postgresql://xce:p%3Ass%40word@db1/x", "p:ss@word"),
    ],
)
def test_the_password_is_hidden_wherever_an_error_text_quotes_it(conn_str: str, secret: str) -> None:
    text = f'failed: invalid "{conn_str}"; auth for {secret} refused\nsecond line'
    shown = redact(text, conn_str)
    assert secret not in shown and conn_str not in shown
    assert "[connection string]" in shown and "refused" in shown and "second line" in shown


def test_password_parts_of_any_connection_string_are_hidden() -> None:
    text = "psql: postgresql://admin:hunter2@other-db/y and password=topsecret here"
    assert redact(text, "host=db1") == "psql: postgresql://admin:***@other-db/y and password=*** here"


def test_a_text_without_secrets_is_kept() -> None:
    text = 'connection to server on socket "/run/pg/.s.PGSQL.5432" failed: No such file or directory'
    assert redact(text, "postgresql:///x?host=/run/pg&user=xce") == text
    assert redact("", "") == ""
