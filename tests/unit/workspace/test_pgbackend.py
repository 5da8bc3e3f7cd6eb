"""``terraform.backend: pg`` in the working directories: schema names, the generated backend block,
the connection string's sources and secrecy, and the refusal of a state left behind."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from tffake import ROOT, SITE, FakeEngine, site_config

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError, TerraformError
from orchestrator.model.config import Config
from orchestrator.workspace.pgbackend import BACKEND_BLOCK, BACKEND_TF, MIGRATED_STATE, ensure_remote_state, schema_name
from orchestrator.workspace.pgconn import pg_conn_str, redact
from orchestrator.workspace.shards import ShardWorkdir
from orchestrator.workspace.statemigration import MIGRATING_STATE, migrate_shard
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


class StateEngine(FakeEngine):
    """The fake engine with a pg backend's state per schema: pulled, pushed, migrated."""

    def __init__(self, remote: dict[Path, dict[str, Any]], push_fails: bool = False) -> None:
        super().__init__()
        self.remote = remote
        self.push_fails = push_fails

    def state_pull(self, workdir: Path) -> dict[str, Any]:
        self.calls.append(("state pull", workdir))
        return self.remote.get(workdir, {"version": 4, "serial": 0, "lineage": "", "resources": []})

    def state_push(self, workdir: Path, state: Mapping[str, Any]) -> None:
        self.calls.append(("state push", workdir))
        if self.push_fails:
            self.remote[workdir] = {"lineage": "another", "serial": 1, "resources": []}  # the other won
            raise TerraformError("Failed to write state: cannot import state over unrelated state")
        self.remote[workdir] = dict(state)


def test_a_new_pg_shard_gets_an_empty_state_at_init_and_an_existing_one_is_left_alone(tmp_path: Path) -> None:
    engine = StateEngine({})
    ensure_remote_state(engine, tmp_path)
    assert [c[0] for c in engine.calls] == ["state pull", "state push"]
    assert engine.remote[tmp_path]["lineage"] and engine.remote[tmp_path]["resources"] == []
    engine.calls.clear()
    ensure_remote_state(engine, tmp_path)  # there is one now: nothing is pushed over it
    assert [c[0] for c in engine.calls] == ["state pull"]
    racing = StateEngine({}, push_fails=True)  # another orchestrator made it first: fine
    ensure_remote_state(racing, tmp_path)
    assert racing.remote[tmp_path]["lineage"] == "another"


def test_a_migration_that_does_not_check_out_puts_the_local_state_back(tmp_path: Path) -> None:
    local = ShardWorkdir(site_config(tmp_path).config, "sim", ROOT, 0)
    prepared_workdir(FakeEngine(), local)
    state = {
        "version": 4,
        "serial": 4,
        "lineage": "l-1",
        "resources": [{"mode": "managed", "type": "t", "name": "x", "instances": [{"attributes": {"id": "i-1"}}]}],
    }
    (local.path / "terraform.tfstate").write_text(json.dumps(state))
    pg = ShardWorkdir(pg_config(tmp_path), "sim", ROOT, 0)
    lost = StateEngine({})  # the schema ends up empty: the object i-1 did not arrive
    with pytest.raises(TerraformError, match="put back"):
        migrate_shard(lost, pg, lambda schema, label: None)
    assert json.loads((pg.path / "terraform.tfstate").read_text()) == state
    assert not (pg.path / BACKEND_TF).exists() and not (pg.path / MIGRATING_STATE).exists()
    assert not (pg.path / MIGRATED_STATE).exists()
    # A schema that holds other objects is never overwritten.
    other = {"lineage": "l-9", "resources": [{"mode": "managed", "type": "t", "name": "y", "instances": [{}]}]}
    with pytest.raises(TerraformError, match="already holds another Terraform state"):
        migrate_shard(StateEngine({}), pg, lambda schema, label: other)
    # One that checks out: the copy is kept as .migrated and the local file goes.
    moved = StateEngine({pg.path: {**state, "lineage": "new", "serial": 1}})
    migrate_shard(moved, pg, lambda schema, label: None)
    assert json.loads((pg.path / MIGRATED_STATE).read_text()) == state
    assert not (pg.path / "terraform.tfstate").exists() and (pg.path / BACKEND_TF).is_file()
