"""docs/quickstart.md: every shell block is marked run or not run, and the blocks the quickstart
test runs go all the way (issue 28, item 3). The run itself: tests/integration/test_quickstart.py.
"""

from __future__ import annotations

import re

import pytest

from tests.quickstart_doc import QUICKSTART, blocks, script

# The steps the quickstart promises, in the order a newcomer meets them.
STEPS = [
    r"xceprov init\b",
    r"xceprov sim up\b",
    r"xceprov plan cpu=\d+\b",
    r"xceprov apply \S+ --bootstrap\b",
    r"xceprov status\b",
    r"xceprov return\b",
    r"xceprov orphans\b",
    r"xceprov daemon\b",
    r"xceprov sim submit\b",
    r"xceprov sim down\b",
]


def test_every_shell_block_of_the_quickstart_is_marked_and_the_run_ones_go_all_the_way() -> None:
    found = blocks(QUICKSTART.read_text())
    commands = script(QUICKSTART.read_text())
    where = [re.search(step, commands) for step in STEPS]
    assert all(where), [s for s, w in zip(STEPS, where, strict=True) if w is None]
    starts = [w.start() for w in where if w is not None]
    assert starts == sorted(starts), "the steps are out of order"
    # The test cannot run the installation or a real cloud; the page still shows them, saying why.
    skipped = [b for b in found if not b.run]
    assert all(b.reason for b in skipped)
    assert any("pip install" in b.text for b in skipped), "no installation step"
    assert any("systemctl enable" in b.text for b in skipped), "no unit installation step"
    assert any("init --provider" in b.text for b in skipped), "no real cloud's first configuration"
    text = QUICKSTART.read_text()
    assert "terraform.provider_mirror" in text and "registry" in text


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        ("text\n\n```sh\nxceprov plan cpu=1\n```\n", "page.md:3: an sh block without"),
        ("<!-- quickstart: run -->\ntext\n```sh\nls\n```\n", "page.md:1: a quickstart mark with no sh block right"),
        ("<!-- quickstart: maybe -->\n```sh\nls\n```\n", "page.md:1: not a quickstart mark"),
        ("<!-- quickstart: run -->\n", "page.md:1: a quickstart mark with no sh block after it"),
        ("<!-- quickstart: not run: -->\n```sh\nls\n```\n", "page.md:1: not a quickstart mark"),
    ],
)
def test_an_unmarked_block_or_a_stray_mark_is_named_by_its_line(page: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        blocks(page, "page.md")


def test_the_script_is_the_run_blocks_in_order() -> None:
    page = (
        "<!-- quickstart: run -->\n```sh\necho one\n```\n"
        "```yaml\nkey: value\n```\n"
        "<!-- quickstart: not run: elsewhere -->\n```sh\necho two\n```\n"
        "<!-- quickstart: run -->\n\n```sh\necho three\n```\n"
    )
    assert script(page) == "set -euo pipefail\necho one\necho three\n"
    assert [(b.run, b.reason) for b in blocks(page)] == [(True, ""), (False, "elsewhere"), (True, "")]
