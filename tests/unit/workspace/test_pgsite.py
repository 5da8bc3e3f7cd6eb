"""The one way from a configuration to the shared store: none with the local backend, one line
without a connection string, and the string never shown, not even in the site's ``repr``."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConfigError
from orchestrator.model.config import Config
from orchestrator.workspace.pgsite import PgSite, pg_site

SECRET = "postgresql://xce:s3cr3t-pw@db.example/xceprov"


def _config(backend: str) -> Config:
    local = Config.model_validate({"cluster": "c1", "providers": {}, "templates": {}})
    return local.model_copy(update={"terraform": local.terraform.model_copy(update={"backend": backend})})


def test_the_local_backend_has_no_site_and_pg_one_of_its_cluster() -> None:
    assert pg_site(_config("local"), {"PG_CONN_STR": SECRET}) is None
    site = pg_site(_config("pg"), {"PG_CONN_STR": SECRET})
    assert site == PgSite(SECRET, "c1")


def test_the_site_never_shows_its_connection_string() -> None:
    site = PgSite(SECRET, "c1")
    assert "s3cr3t-pw" not in repr(site) and "s3cr3t-pw" not in str(site)
    assert "c1" in repr(site)


def test_pg_without_a_connection_string_is_one_line_naming_both_places() -> None:
    with pytest.raises(ConfigError) as missing:
        pg_site(_config("pg"), {})
    assert str(missing.value).count("\n") == 0
    assert "PG_CONN_STR" in str(missing.value) and "terraform.pg_conn_file" in str(missing.value)
