"""Finding, reading and validating ``xceprov.yaml``.

Search order: ``--config``, then ``$XCEPROV_CONFIG``, then ``./xceprov.yaml``; with none, the
built-in configuration of the embedded simulated world. Every problem is reported at once, one
line each, as ``<file>: <key.path>: <what is wrong>``.

YAML aliases are counted before anything is built: a document whose aliases expand to more
than ``MAX_YAML_VALUES`` values (a "billion laughs" document is a few hundred bytes) is refused
without being expanded. Trust is never implied: ``controller.ca`` must name a CA file or say
``system``.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.errors import ConfigError
from orchestrator.model.config import SYSTEM_TRUST, Config

ENV_VAR = "XCEPROV_CONFIG"
DEFAULT_NAME = "xceprov.yaml"
BUILTIN_LABEL = "<built-in>"
# Far above any real site (every key, list item and scalar counts once per place it appears
# after alias expansion), far below what hurts: validating 10^5 values takes well under a second.
MAX_YAML_VALUES = 100_000


@dataclass(frozen=True)
class LoadedConfig:
    """A validated configuration and where it came from (relative paths are already resolved)."""

    config: Config
    source: str
    base_dir: Path


def find_config(explicit: str | None) -> Path | None:
    """The configuration file to use, or None for the built-in one."""
    if explicit:
        return Path(explicit)
    if env := os.environ.get(ENV_VAR):
        return Path(env)
    local = Path.cwd() / DEFAULT_NAME
    return local if local.is_file() else None


def load_config(explicit: str | None = None) -> LoadedConfig:
    """Find, parse and validate the configuration; raise ConfigError listing every problem."""
    path = find_config(explicit)
    if path is None:
        text = resources.files("orchestrator.defaults").joinpath(DEFAULT_NAME).read_text()
        return parse_config(text, BUILTIN_LABEL, Path.cwd())
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{path}: configuration file not found"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{path}: cannot read: {exc}"]) from None
    return parse_config(text, str(path), path.resolve().parent)


def parse_config(text: str, source: str, base_dir: Path) -> LoadedConfig:
    """Validate configuration text; ``source`` names it in error lines."""
    data = load_yaml(text, source)
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: expected a mapping at the top level, got {type(data).__name__}"])
    trust = trust_problems(data, source)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        problems = trust + [p for p in validation_problems(exc, source, data, Config) if p not in trust]
        # Field errors stop pydantic before the cross-reference check; run it on the raw data
        # so that a missing provider is reported together with everything else.
        problems += [p for p in reference_problems(data, source) if p not in problems]
        raise ConfigError(problems) from None
    if trust:
        raise ConfigError(trust)
    return LoadedConfig(config=_resolve_paths(config, base_dir), source=source, base_dir=base_dir)


def load_yaml(text: str, source: str) -> Any:
    """Parse one YAML document safely, refusing alias bombs before they are expanded."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is not None:
            expanded_size(node, source)
        return loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError([f"{source}{where}: malformed YAML: {problem}"]) from None
    except RecursionError:
        raise ConfigError([f"{source}: YAML nested too deeply"]) from None
    finally:
        loader.dispose()


def expanded_size(root: yaml.Node, source: str, limit: int = MAX_YAML_VALUES) -> int:
    """How many values ``root`` holds once every alias is expanded, computed without expanding.

    Each distinct node is sized once (aliases share nodes), so the cost is linear in the
    document's text even when the expansion is exponential. ConfigError past ``limit``, or on
    an alias that refers to a node containing itself.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigError([f"{source}: YAML alias refers to a value that contains it (recursive alias)"])
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        active.discard(key)
        if total > limit:
            raise ConfigError(
                [f"{source}: YAML aliases expand to more than {limit} values; write the values out instead"]
            )
        sizes[key] = total
        return total

    return size(root)


def trust_problems(data: dict[str, Any], source: str) -> list[str]:
    """``controller.ca`` must be said: a CA file, or ``system`` for the system trust store."""
    controller = data.get("controller")
    ca = controller.get("ca") if isinstance(controller, dict) else None
    if ca is None or (isinstance(ca, str) and not ca.strip()):
        return [
            f"{source}: controller.ca: required: the CA file that signed the controller's certificate, "
            f"or '{SYSTEM_TRUST}' to trust the system store"
        ]
    return []


def validation_problems(exc: ValidationError, source: str, data: Any, model: type[BaseModel]) -> list[str]:
    """One line per pydantic error, with the key path and a suggestion for unknown keys."""
    lines: list[str] = []
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        path = ".".join(loc) or "(top level)"
        if error["type"] == "extra_forbidden":
            lines.append(f"{source}: {path}: unknown key{_suggestion(model, loc)}")
        elif error["type"] == "value_error" and not loc:
            # Cross-reference problems arrive as one message joined with "; ".
            message = str(error["msg"]).removeprefix("Value error, ")
            lines.extend(f"{source}: {part}" for part in message.split("; "))
        else:
            message = str(error["msg"]).removeprefix("Value error, ")
            got = error.get("input")
            shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
            lines.append(f"{source}: {path}: {message}{shown}")
    return lines


def reference_problems(data: dict[str, Any], source: str) -> list[str]:
    """Templates naming providers that do not exist, checked on raw (possibly invalid) data."""
    providers = data.get("providers")
    templates = data.get("templates")
    if not isinstance(providers, dict) or not isinstance(templates, dict):
        return []
    problems = []
    for tname, template in templates.items():
        wanted = template.get("providers") if isinstance(template, dict) else None
        if not isinstance(wanted, dict):
            continue
        for pname in wanted:
            if pname not in providers:
                known = ", ".join(sorted(map(str, providers))) or "none"
                where = f"{source}: templates.{tname}.providers.{pname}"
                problems.append(f"{where}: no provider named {pname!r} (known: {known})")
    return problems


def _suggestion(model: type[BaseModel], loc: list[str]) -> str:
    """' (did you mean 'x'?)' when a known key of the enclosing section is close to the unknown one."""
    section = _section_model(model, loc[:-1])
    if section is None:
        return ""
    close = difflib.get_close_matches(loc[-1], list(section.model_fields), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _section_model(model: type[BaseModel], loc: list[str]) -> type[BaseModel] | None:
    """Walk field annotations along ``loc``; dict keys (provider and template names) are skipped."""
    import typing

    current: Any = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(part)
            if field is None:
                return None
            current = field.annotation
            continue
        origin = typing.get_origin(current)
        if origin is dict:
            current = typing.get_args(current)[1]
        else:
            return None
    while typing.get_origin(current) is not None and typing.get_origin(current) is not dict:
        args = [a for a in typing.get_args(current) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not args:
            return None
        current = args[0]
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _resolve_paths(config: Config, base_dir: Path) -> Config:
    """Make every relative path in the configuration relative to the configuration file's directory."""

    def fix(path: Path | None) -> Path | None:  # None: unset (or, for ca, the system store)
        if path is None:
            return None
        path = path.expanduser()
        return path if path.is_absolute() else (base_dir / path)

    return config.model_copy(
        update={
            "state_dir": fix(config.state_dir),
            "template_dirs": [fix(p) for p in config.template_dirs],
            "controller": config.controller.model_copy(
                update={
                    "ca": fix(config.controller.ca),
                    "client_cert": fix(config.controller.client_cert),
                    "client_key": fix(config.controller.client_key),
                    "join_key": fix(config.controller.join_key),
                }
            ),
            "ansible": config.ansible.model_copy(
                update={"ssh_key": fix(config.ansible.ssh_key), "site_dir": fix(config.ansible.site_dir)}
            ),
            "sim": config.sim.model_copy(update={"state_dir": fix(config.sim.state_dir)}),
            "daemon": config.daemon.model_copy(
                update={
                    "metrics": config.daemon.metrics.model_copy(
                        update={
                            "tls_cert": fix(config.daemon.metrics.tls_cert),
                            "tls_key": fix(config.daemon.metrics.tls_key),
                            "tls_client_ca": fix(config.daemon.metrics.tls_client_ca),
                        }
                    )
                }
            ),
        }
    )
