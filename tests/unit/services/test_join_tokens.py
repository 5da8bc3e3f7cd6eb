"""Join tokens live exactly as long as the run that wrote them, even one killed with ``kill -9``."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.clients.ansible.inventory import InstanceRecord
from orchestrator.configfile import LoadedConfig
from orchestrator.model.config import Config
from orchestrator.protocol.jointoken import check_token, read_join_key
from orchestrator.services.join_tokens import TOKENS_VAR, join_token_vars, remove_own_tokens

TESTS = Path(__file__).resolve().parents[2]
RECORD = InstanceRecord("op-1-000", "i-1", "op-1-000", "10.0.0.1", "cpu", "sim", "op-1")

# A bootstrap run in another process: it writes its tokens, says where, and waits to be killed.
CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from tffake import site_config
    from orchestrator.services.join_tokens import TOKENS_VAR, join_token_vars
    from orchestrator.clients.ansible.inventory import InstanceRecord
    config = site_config(Path(sys.argv[2])).config
    config = config.model_copy(
        update={"controller": config.controller.model_copy(update={"join_key": Path(sys.argv[3])})}
    )
    record = InstanceRecord("op-2-000", "i-2", "op-2-000", "10.0.0.2", "cpu", "sim", "op-2")
    with join_token_vars(config, [record]) as extra:
        print(extra[TOKENS_VAR], flush=True)
        time.sleep(3600)
    """
)


@pytest.fixture
def config(loaded: LoadedConfig, tmp_path: Path) -> Config:
    key = tmp_path / "join.key"
    key.write_text("ab" * 32)
    controller = loaded.config.controller.model_copy(update={"join_key": key})
    return loaded.config.model_copy(update={"controller": controller})


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.communicate()  # reaped, its pipe closed


def other_run(runs: list[subprocess.Popen[str]], tmp_path: Path, config: Config) -> tuple[subprocess.Popen[str], Path]:
    """A bootstrap run in its own process, holding its tokens file (returned)."""
    assert config.controller.join_key is not None
    argv = [sys.executable, "-c", CHILD, str(TESTS), str(tmp_path), str(config.controller.join_key)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    runs.append(proc)
    assert proc.stdout is not None
    tokens = Path(proc.stdout.readline().strip())
    assert tokens.name == "tokens.json" and "op-2-000" in json.loads(tokens.read_text())
    return proc, tokens.parent


def test_tokens_of_a_killed_run_are_removed_at_the_next_run_and_a_live_runs_kept(
    tmp_path: Path, config: Config, runs: list[subprocess.Popen[str]]
) -> None:
    killed, killed_dir = other_run(runs, tmp_path, config)
    live, live_dir = other_run(runs, tmp_path, config)
    killed.kill()  # SIGKILL: no finally, no stop step
    killed.wait()
    assert (killed_dir / "tokens.json").exists()  # left behind, as a hard exit leaves it
    with join_token_vars(config, [RECORD]) as extra:
        own = Path(extra[TOKENS_VAR])
        assert json.loads(own.read_text()).keys() == {"op-1-000"}
        assert not killed_dir.exists()
        assert (live_dir / "tokens.json").exists()  # its process still runs: not touched
    assert not own.parent.exists()
    assert live.poll() is None and (live_dir / "tokens.json").exists()
    live.kill()
    live.wait()
    with join_token_vars(config, [RECORD]):
        assert not live_dir.exists()
    assert [p.name for p in (config.state_dir / "ansible").iterdir()] == []


def test_an_exit_that_skips_the_runs_end_removes_its_tokens_first(config: Config) -> None:
    # What the daemon does as a stop step, before it exits past stop_timeout with os._exit.
    with join_token_vars(config, [RECORD]) as extra:
        tokens = Path(extra[TOKENS_VAR])
        remove_own_tokens()
        assert not tokens.parent.exists()
    assert [p.name for p in (config.state_dir / "ansible").iterdir()] == []


def test_tokens_expire_at_each_hosts_join_deadline_else_the_providers_from_now(config: Config) -> None:
    other = InstanceRecord("op-1-001", "i-2", "op-1-001", "10.0.0.2", "cpu", "sim", "op-1")
    before = time.time()
    with join_token_vars(config, [RECORD, other], {"op-1-000": 1_800_000_000.25}) as extra:
        tokens = json.loads(Path(extra[TOKENS_VAR]).read_text())
    after = time.time()
    assert config.controller.join_key is not None
    key = read_join_key(config.controller.join_key)
    # The op's deadline (rounded up: a token never expires before its host's deadline).
    assert tokens["op-1-000"].startswith("v2.1800000001.")
    assert check_token(key, "op-1-000", "op-1-000", tokens["op-1-000"]) == 1_800_000_001
    # No deadline known (a re-run of xceprov bootstrap): the provider's join_deadline from now.
    expires = check_token(key, "op-1-001", "op-1-001", tokens["op-1-001"])
    window = float(config.providers["sim"].join_deadline)
    assert isinstance(expires, int) and before + window <= expires <= after + window + 1
