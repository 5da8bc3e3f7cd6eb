"""The role's contract: every variable prefixed, documented in defaults, typed in argument_specs."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[3] / "ansible" / "roles" / "xce_node_manager"


def test_defaults_and_argument_specs_agree() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options = specs["main"]["options"]
    assert all(k.startswith("xce_node_manager_") for k in defaults)
    assert set(defaults) == set(options)
    for name, spec in options.items():
        if "default" in spec:
            assert spec["default"] == defaults[name], name
        assert spec.get("description"), name


def test_every_default_is_documented_by_a_comment() -> None:
    text = (ROLE / "defaults" / "main.yml").read_text()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^xce_node_manager_\w+:", line):
            above = lines[i - 1] if i else ""
            assert above.startswith("#") or lines[i - 1].startswith("xce_node_manager_"), line


def test_role_uses_only_its_own_prefix() -> None:
    used = set()
    for path in (ROLE / "tasks").glob("*.yml"):
        used |= set(re.findall(r"\b(xce_node_manager_\w+)", path.read_text()))
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert used <= set(defaults), used - set(defaults)
