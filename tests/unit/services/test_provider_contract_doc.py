"""docs/provider-contract.md shows every document's JSON Schema exactly as the contract validates it.

The "Schemas" section of the page, from its first ``###`` heading on, must equal what
:func:`render` makes of ``SCHEMAS``: a schema changed in the code and not in the page (or the
other way round) fails here. To write the section again after a change of the documents:

    .venv/bin/python tests/unit/services/test_provider_contract_doc.py
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[3] / "docs" / "provider-contract.md"
SECTION = "## Schemas"


def render(schemas: Mapping[str, Mapping[str, Any]]) -> str:
    """The schema part of the page's "Schemas" section."""
    parts: list[str] = []
    for name, kinds in schemas.items():
        parts.append(f"### `{name}`\n")
        for kind, schema in kinds.items():
            parts.append(f"{kind}:\n\n```json\n{json.dumps(schema, indent=2)}\n```\n")
    return "\n".join(parts)


def documented(text: str) -> str:
    """The page's "Schemas" section from its first ``###`` heading to the next ``##`` section."""
    assert f"\n{SECTION}\n" in text, f"{DOC.name} has no {SECTION!r} section"
    section = text.split(f"\n{SECTION}\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    assert "\n### " in section, f"{DOC.name}: {SECTION} shows no schema"
    return "### " + section.split("\n### ", 1)[1].rstrip("\n") + "\n"


def test_the_page_shows_every_schema_as_the_contract_has_it() -> None:
    from orchestrator.services.provider_contract import SCHEMAS

    expected = render(SCHEMAS)
    assert documented(DOC.read_text()) == expected, (
        f"{DOC} and SCHEMAS differ: write the section again with "
        "`.venv/bin/python tests/unit/services/test_provider_contract_doc.py`"
    )


def test_every_action_has_its_input_and_output_schema_on_the_page() -> None:
    from orchestrator.services.provider_contract import ACTIONS

    shown = documented(DOC.read_text())
    for action in ACTIONS:
        section = shown.split(f"### `{action}`\n", 1)
        assert len(section) == 2, f"no schema of {action} on the page"
        part = section[1].split("\n### ", 1)[0]
        assert "input:\n\n```json" in part and "output:\n\n```json" in part, action


def rewrite() -> None:
    """Write the page's schema part again from ``SCHEMAS`` (the rest of the page is kept)."""
    from orchestrator.services.provider_contract import SCHEMAS

    text = DOC.read_text()
    head, rest = text.split(f"\n{SECTION}\n", 1)
    after = rest.split("\n## ", 1)
    intro = after[0].split("\n### ", 1)[0].rstrip("\n")
    tail = f"\n## {after[1]}" if len(after) == 2 else ""
    DOC.write_text(f"{head}\n{SECTION}\n{intro}\n\n{render(SCHEMAS)}{tail}")


if __name__ == "__main__":
    sys.path.insert(0, str(DOC.parents[1]))
    rewrite()
