"""A PostgreSQL password stays secret whatever characters it holds (issue 27 item 1).

The password holds every printable punctuation character. Written into a libpq URI unencoded
(only ``@``, ``/`` and ``%`` percent-encoded, as libpq needs), psycopg accepts it and Terraform's
pg backend refuses it and quotes it, JSON-escaped (``\\u003c``) in its ``-json`` output: no
escaped, quoted or percent-encoded form of it may reach an output, a log, the audit or a file.
"""

from __future__ import annotations

import os
import string
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from pg_server import PgServer, pg_server, standalone_site

from orchestrator.configfile import ENV_VAR

pytestmark = pytest.mark.integration

# Every printable punctuation character, in two orders: Go's URL parser cuts the URL at the first
# "#" (the first order: only the start of the password reaches the message) and quotes the rest
# with "<", ">" and "&" escaped in Terraform's JSON (the second). The markers (letters and digits)
# are in every part of each: none may be found anywhere.
MARKERS = ("Pw0", "Mid9", "End7")
PASSWORDS = tuple(
    f"{MARKERS[0]}{chars[:16]}{MARKERS[1]}{chars[16:]}{MARKERS[2]}"
    for chars in (string.punctuation, string.punctuation[::-1])
)
ROLES = ("xcesecret1", "xcesecret2")


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    with pg_server() as server:
        with psycopg.connect(server.conn_str, autocommit=True) as conn:
            for role, password in zip(ROLES, PASSWORDS, strict=True):
                conn.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password.replace(chr(39), chr(39) * 2)}'")
        yield server


def uri(server: PgServer, n: int, encoded: str = "@/%") -> str:
    """Role ``n``'s URI as libpq takes it: its password unencoded but for the ``encoded``
    characters (by default the three libpq needs encoded)."""
    password = "".join(quote(c, safe="") if c in encoded else c for c in PASSWORDS[n])
    return f"postgresql://{ROLES[n]}:{password}@/xceprov?host={server.socket_dir}&sslmode=disable"


def leaks(text: str) -> list[str]:
    """The markers of the passwords ``text`` holds (none when every part of them was hidden)."""
    return [marker for marker in MARKERS if marker in text]


def run(site: Path, conn_str: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PG_CONN_STR"}
    env.update({ENV_VAR: str(site / "xceprov.yaml"), "PG_CONN_STR": conn_str})
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args],
        cwd=site,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.parametrize("n", [0, 1])
def test_libpq_takes_the_uri_and_terraform_refuses_it_without_showing_the_password(
    tmp_path: Path, pg: PgServer, n: int
) -> None:
    conn_str = uri(pg, n)
    with psycopg.connect(conn_str, autocommit=True) as conn:  # what the shared store accepts
        assert conn.execute("SELECT current_user").fetchone() == (ROLES[n],)
    site = tmp_path / "site"
    site.mkdir()
    (site / "xceprov.yaml").write_text(standalone_site(f"pgsecret{n}"))
    # Planned with the password fully encoded (Terraform takes that), applied with the URI
    # Terraform refuses: the apply is audited, its failure told.
    planned = run(site, uri(pg, n, string.punctuation), "plan", "cpu=1", "--out", "burst")
    assert planned.returncode == 0, planned.stderr
    said = ""
    for args in (("validate",), ("plan", "cpu=1", "--out", "again"), ("-v", "plan", "cpu=1"), ("apply", "burst")):
        done = run(site, conn_str, *args)
        assert done.returncode != 0
        # Terraform's refusal is still told (what an operator needs to fix the string).
        assert "Error: parse " in done.stderr, done.stderr
        said += done.stdout + done.stderr
    assert leaks(said) == [], said
    holders = {str(p): leaks(p.read_text(errors="replace")) for p in site.rglob("*") if p.is_file()}
    assert '"action": "apply"' in (site / "state" / "audit.log").read_text()  # looked into too
    assert {path: found for path, found in holders.items() if found} == {}
