"""``xceprov cost``'s bad input: one line naming the option and value, a non-zero exit, before
any controller is asked. (Costs read back from a real run: tests/integration/test_cost_ledger.py.)"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from tests.sim_cloud_cli import run_cli as _run
from tests.sim_cloud_cli import write_sim_site


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """A configuration of the simulated world (no controller runs)."""
    return write_sim_site(tmp_path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--since", "soon"), "bad --since 'soon': expected a Unix time"),
        (("--until", "-5"), "bad --until '-5'"),
        (("--since", "1h", "--until", "2h"), "bad --until '2h': before --since '1h'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(config: Path, args: tuple[str, ...], message: str) -> None:
    code, _, err = _run(config, "cost", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_by_takes_one_of_its_words(config: Path) -> None:
    # click's own usage error, as every option with a few words: exit 2, the last line names it.
    code, _, err = _run(config, "cost", "--by", "flavor")
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        "Error: Invalid value for '--by': 'flavor' is not one of 'provider', 'template', 'group', 'op'."
    )


def test_no_controller_is_one_line_and_exit_75(config: Path) -> None:
    # The facts are the controller's: none answering is "retry later" (docs/exit-codes.md). A port
    # nothing listens on, whatever simulated world another test runs meanwhile.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    doc = yaml.safe_load(config.read_text())
    doc["controller"]["addresses"] = [f"127.0.0.1:{port}"]
    config.write_text(yaml.safe_dump(doc))
    code, _, err = _run(config, "cost")
    assert code == 75 and "controller unreachable" in err and len(err.strip().splitlines()) == 1
