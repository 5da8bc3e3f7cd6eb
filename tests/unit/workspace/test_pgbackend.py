"""``terraform.backend: pg`` in the working directories: schema names, the generated backend block,
the connection string's sources and secrecy, and the refusal of a state left behind."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest
from tffake import ROOT, SITE, FakeEngine, site_config

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError
from orchestrator.model.config import Config
from orchestrator.workspace.pgbackend import BACKEND_BLOCK, BACKEND_TF, schema_name
from orchestrator.workspace.pgconn import pg_conn_str, redact
from orchestrator.workspace.shards import ShardWorkdir
from orchestrator.workspace.terraform import prepared_workdir

SECRET = "postgresql://xce:s3cr%40t-pw@db.example/xceprov?sslmode=require"
IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def pg_config(tmp_path: Path, extra: str = "") -> Config:
    """The unit test site with ``terraform.backend: pg`` (and ``extra`` terraform keys)."""
    text = site_config(tmp_path).config.model_dump(mode="json")
    text["terraform"]["backend"] = "pg"
    if extra:
        text["terraform"]["pg_conn_file"] = extra
    return Config.model_validate(text)


@pytest.mark.parametrize(
    ("names", "expected"),
    [(("site1", "aws", 0), "site1_aws_0"), (("site1", "aws", 12), "site1_aws_12")],
)
def test_plain_names_make_a_readable_schema(names: tuple[str, str, int], expected: str) -> None:
    assert schema_name(*names) == expected


def test_names_that_would_collide_never_share_a_schema() -> None:
    # '-' and '_' both become '_' in the readable part, and '_' also separates the parts: every
    # pair below reads the same once folded, and each must still get its own schema.
    names = ["a", "b", "a-b", "a_b", "b-c", "b_c", "c", "a-", "a--b", "a__b", "x" * 40, "x" * 39 + "y"]
    seen: dict[str, tuple[str, str, int]] = {}
    for cluster, provider, index in itertools.product(names, names, (0, 1, 10, 999999)):
        if not re.match(r"^[a-z]", cluster) or not re.match(r"^[a-z]", provider):
            continue
        schema = schema_name(cluster, provider, index)
        assert IDENTIFIER.match(schema), schema
        assert schema not in seen, (schema, seen.get(schema), (cluster, provider, index))
        seen[schema] = (cluster, provider, index)
    assert schema_name("a-b", "c", 0) != schema_name("a", "b-c", 0)
    assert schema_name("a_b", "c", 0) != schema_name("a", "b_c", 0)


def test_a_pg_working_directory_gets_the_backend_block_and_its_schema(tmp_path: Path) -> None:
    config = pg_config(tmp_path)
    engine = FakeEngine()
    shard = ShardWorkdir(config, "sim", ROOT, 2)
    prepared_workdir(engine, shard)
    assert (shard.path / BACKEND_TF).read_text() == BACKEND_BLOCK
    assert shard.backend_config() == {"schema_name": "unit_sim_2"}
    # The shipped root itself stays a local-backend configuration.
    assert not (ROOT / "terraform" / "roots" / "xcesim" / BACKEND_TF).exists()
    local = ShardWorkdir(site_config(tmp_path / "l").config, "sim", ROOT, 0)
    prepared_workdir(FakeEngine(), local)
    assert not (local.path / BACKEND_TF).exists() and local.backend_config() == {}


def test_switching_to_pg_with_a_local_state_is_refused_until_migrated(tmp_path: Path) -> None:
    local = ShardWorkdir(site_config(tmp_path).config, "sim", ROOT, 0)
    prepared_workdir(FakeEngine(), local)
    (local.path / "terraform.tfstate").write_text('{"version": 4, "serial": 3, "resources": []}')
    pg = ShardWorkdir(pg_config(tmp_path), "sim", ROOT, 0)
    engine = FakeEngine()
    with pytest.raises(ConfigError) as refused:
        prepared_workdir(engine, pg)
    assert str(refused.value).count("\n") == 0
    assert "xceprov terraform migrate-state" in str(refused.value) and "terraform.tfstate" in str(refused.value)
    assert engine.calls == [] and not (pg.path / BACKEND_TF).exists()  # nothing was changed


def test_going_back_to_local_from_pg_is_refused(tmp_path: Path) -> None:
    pg = ShardWorkdir(pg_config(tmp_path), "sim", ROOT, 0)
    prepared_workdir(FakeEngine(), pg)
    (pg.path / ".terraform" / "terraform.tfstate").write_text('{"version": 3, "backend": {"type": "pg"}}')
    with pytest.raises(ConfigError, match="keeps its Terraform state in PostgreSQL"):
        prepared_workdir(FakeEngine(), ShardWorkdir(site_config(tmp_path).config, "sim", ROOT, 0))


def test_the_connection_string_comes_from_the_environment_first_then_the_file(tmp_path: Path) -> None:
    assert pg_conn_str(site_config(tmp_path).config, {"PG_CONN_STR": SECRET}) is None  # local: none needed
    conn_file = tmp_path / "pg.conn"
    conn_file.write_text(f"  {SECRET}\n")
    config = pg_config(tmp_path, str(conn_file))
    assert pg_conn_str(config, {}) == SECRET
    assert pg_conn_str(config, {"PG_CONN_STR": "postgresql:///other"}) == "postgresql:///other"


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "no such file"), ("", "empty"), ("  \n", "empty"), (f"{SECRET}\nmore\n", "more than one line")],
)
def test_a_bad_connection_file_is_one_line_naming_key_and_file_never_its_content(
    tmp_path: Path, content: str | None, problem: str
) -> None:
    conn_file = tmp_path / "pg.conn"
    if content is not None:
        conn_file.write_text(content)
    with pytest.raises(ConfigError) as refused:
        pg_conn_str(pg_config(tmp_path, str(conn_file)), {})
    message = str(refused.value)
    assert message.count("\n") == 0 and problem in message
    assert message.startswith(f"terraform.pg_conn_file: {conn_file}") and "s3cr" not in message


def test_pg_without_any_connection_string_names_terraform_backend(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^terraform\.backend: pg needs .*PG_CONN_STR"):
        pg_conn_str(pg_config(tmp_path), {"PG_CONN_STR": "  "})


def test_a_credential_names_a_file_of_the_credentials_directory(tmp_path: Path) -> None:
    creds = tmp_path / "creds"
    creds.mkdir()
    (creds / "pg").write_text(SECRET + "\n")
    text = SITE.format(cluster="c", state=tmp_path / "state")
    text += "terraform: {backend: pg, pg_conn_file: 'credential:pg'}\n"
    loaded = parse_config(text, "site.yaml", tmp_path, {"CREDENTIALS_DIRECTORY": str(creds)})
    assert pg_conn_str(loaded.config, {}) == SECRET
    with pytest.raises(ConfigError, match=r"terraform\.pg_conn_file: 'credential:pg' needs"):
        parse_config(text, "site.yaml", tmp_path, {})


def test_redact_hides_the_string_and_its_password() -> None:
    text = f"dial {SECRET} failed; password s3cr@t-pw and s3cr%40t-pw rejected"
    hidden = redact(text, SECRET)
    assert "s3cr" not in hidden and hidden.count("***") == 3
    assert redact("password=hunter2 host=x", "host=x password=hunter2") == "password=*** host=x"
    assert "hunter2" not in redact("auth failed for password=hunter2", "host=x password=hunter2")
