"""``xceprov cost``'s bad input: one line naming the option and value, a non-zero exit, before
any controller is asked. (Costs read back from a real run: tests/integration/test_cost_ledger.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.sim.cloud import test_sim_cloud_offers_cli as offers_cli
from tests.unit.sim.cloud.test_sim_cloud_offers_cli import _run

config = offers_cli.config  # a configuration of the simulated world


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
