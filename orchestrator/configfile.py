"""Finding, reading and validating ``xceprov.yaml``.

Search order: ``--config``, then ``$XCEPROV_CONFIG``, then ``./xceprov.yaml``; with none, the
built-in configuration of the embedded simulated world. Every problem is reported at once, one
line each, as ``<file>: <key.path>: <what is wrong>``.

Under systemd (``contrib/systemd/xceprov.service``) two things come from the unit's environment:
``state_dir``, when the file leaves it out, is ``$STATE_DIRECTORY`` (``StateDirectory=``), and a
file key written ``credential:NAME`` is ``$CREDENTIALS_DIRECTORY/NAME`` (``LoadCredential=``), so
keys stay root's and the unprivileged daemon reads its copies.

YAML aliases are counted before anything is built: a document whose aliases expand to more
than ``MAX_YAML_VALUES`` values (a "billion laughs" document is a few hundred bytes) is refused
without being expanded. A value YAML's constructors cannot build (``2026-02-30``, ``!!int x``)
stops the reading like a syntax error, one line with its line, column and key path. Trust is
never implied: ``controller.ca`` must name a CA file or say ``system``.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.errors import ConfigError
from orchestrator.model.config import SYSTEM_TRUST, Config
from orchestrator.model.provider_mirror import shown as url_shown
from orchestrator.model.values import OversizedNumber, shown, value_problems

ENV_VAR = "XCEPROV_CONFIG"
DEFAULT_NAME = "xceprov.yaml"
BUILTIN_LABEL = "<built-in>"
# Far above any real site (every key, list item and scalar counts once per place it appears
# after alias expansion), far below what hurts: validating 10^5 values takes well under a second.
MAX_YAML_VALUES = 100_000
# Set by systemd for a unit with StateDirectory= / LoadCredential= (systemd.exec(5)).
STATE_DIRECTORY_VAR = "STATE_DIRECTORY"
CREDENTIALS_DIRECTORY_VAR = "CREDENTIALS_DIRECTORY"
CREDENTIAL_PREFIX = "credential:"


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


def parse_config(text: str, source: str, base_dir: Path, environ: Mapping[str, str] | None = None) -> LoadedConfig:
    """Validate configuration text; ``source`` names it in error lines.

    ``environ`` (default: this process's) supplies systemd's ``STATE_DIRECTORY`` and
    ``CREDENTIALS_DIRECTORY``.
    """
    data = load_yaml(text, source)
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: expected a mapping at the top level, got {type(data).__name__}"])
    trust = trust_problems(data, source)
    # NaN, infinities, out-of-range integers, dates, binary data: refused here, each with its
    # key path, whatever type the key has (free-form module settings and template variables too).
    values = value_problems(data)
    problems = trust + [f"{source}: {where}: {what}" for where, what in values]
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        flagged = {where for where, _ in values}
        problems += [
            p
            for p in validation_problems(exc, source, data, Config)
            if p not in problems and not _related(p, source, flagged)  # said once, by value_problems
        ]
        # Field errors stop pydantic before the cross-reference check; run it on the raw data
        # so that a missing provider is reported together with everything else.
        problems += [p for p in reference_problems(data, source) if p not in problems]
        raise ConfigError(problems) from None
    if problems:
        raise ConfigError(problems)
    config = from_systemd(config, source, os.environ if environ is None else environ)
    return LoadedConfig(config=_resolve_paths(config, base_dir, source), source=source, base_dir=base_dir)


def _related(line: str, source: str, paths: set[str]) -> bool:
    """Whether the problem ``line`` ("<file>: <key.path>: ...") is about a key at, above or below one of ``paths``."""
    key = line.removeprefix(f"{source}: ").split(": ", 1)[0]
    return any(key == p or key.startswith(f"{p}.") or p.startswith(f"{key}.") for p in paths)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, except that an integer too long to be any value is kept as text.

    Converting a digit string of thousands of characters is slow, and Python refuses one of
    more than 4300 digits with a ValueError; ``value_problems`` refuses the kept text with its
    key path instead.
    """

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        text = str(self.construct_scalar(node))
        if len(text) > MAX_INTEGER_CHARACTERS:
            return OversizedNumber(text)
        return super().construct_yaml_int(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """PyYAML's, except that a scalar its constructors cannot build (``2026-02-30``, ``!!int x``)
        is an ``_Unbuilt`` naming the node, not the ValueError (or KeyError, AttributeError...)
        the constructor happened to raise: ``load_yaml`` turns it into a line with the key path."""
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, LookupError, AttributeError, ArithmeticError) as exc:
            raise _Unbuilt(node, exc) from exc


class _Unbuilt(Exception):
    """A YAML node the constructors could not build (raised once, at the innermost node)."""

    def __init__(self, node: yaml.Node, cause: Exception) -> None:
        super().__init__(str(cause))
        self.node = node
        self.cause = cause


# An integer written in more characters than this is out of range whatever its base
# (2**53 is 16 decimal digits, 53 binary ones); underscores and signs leave room to spare.
MAX_INTEGER_CHARACTERS = 80
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def from_systemd(config: Config, source: str, environ: Mapping[str, str]) -> Config:
    """``state_dir`` from ``$STATE_DIRECTORY`` when the file leaves it out; ``credential:NAME`` keys
    as files of ``$CREDENTIALS_DIRECTORY``. ConfigError naming every key that cannot be resolved."""
    problems: list[str] = []
    update: dict[str, Any] = {}
    state_dirs = environ.get(STATE_DIRECTORY_VAR, "")
    if "state_dir" not in config.model_fields_set and state_dirs:
        # systemd joins several StateDirectory= entries with ':'; the first is the daemon's.
        first = Path(state_dirs.split(":")[0])
        if first.is_absolute():
            update["state_dir"] = first
        else:
            problems.append(
                f"{source}: state_dir: not set, and ${STATE_DIRECTORY_VAR} ({str(first)!r}) is not absolute"
            )
    sections: dict[str, tuple[BaseModel, tuple[str, ...]]] = {
        "controller": (config.controller, ("ca", "client_cert", "client_key", "join_key")),
        "ansible": (config.ansible, ("ssh_key",)),
        "terraform": (config.terraform, ("pg_conn_file",)),
    }
    for name, (section, keys) in sections.items():
        found = {}
        for key in keys:
            value = getattr(section, key)
            if value is not None and str(value).startswith(CREDENTIAL_PREFIX):
                resolved = _credential(str(value), f"{source}: {name}.{key}", environ, problems)
                found[key] = resolved if resolved is not None else value
        if found:
            update[name] = section.model_copy(update=found)
    if problems:
        raise ConfigError(problems)
    return config.model_copy(update=update) if update else config


def _credential(value: str, where: str, environ: Mapping[str, str], problems: list[str]) -> Path | None:
    """The file a ``credential:NAME`` value names, or None with the problem appended."""
    name = value.removeprefix(CREDENTIAL_PREFIX)
    if not name or "/" in name or name in (".", ".."):
        problems.append(f"{where}: {value!r}: a credential name is one file name (no '/', not '.' or '..')")
        return None
    directory = environ.get(CREDENTIALS_DIRECTORY_VAR, "")
    if not directory:
        problems.append(
            f"{where}: {value!r} needs ${CREDENTIALS_DIRECTORY_VAR}, which is not set "
            "(systemd sets it for a unit with LoadCredential=)"
        )
        return None
    path = Path(directory) / name
    if not path.is_file():
        problems.append(
            f"{where}: {value!r}: no credential {name!r} in {directory} (LoadCredential={name}:... in the unit)"
        )
        return None
    return path


def load_yaml(text: str, source: str) -> Any:
    """Parse one YAML document safely, refusing alias bombs before they are expanded."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        expanded_size(node, source)
        try:
            return loader.construct_document(node)
        except _Unbuilt as exc:
            raise ConfigError([unbuilt_problem(loader, node, exc, source)]) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError([f"{source}{where}: malformed YAML: {problem}"]) from None
    except RecursionError:
        raise ConfigError([f"{source}: YAML nested too deeply"]) from None
    finally:
        loader.dispose()


# The YAML types whose constructors can fail on a value the parser accepted, as a user calls them.
_KINDS = {"int": "integer", "float": "number", "bool": "boolean", "binary": "binary data", "timestamp": "timestamp"}


def unbuilt_problem(loader: _Loader, root: yaml.Node, exc: _Unbuilt, source: str) -> str:
    """``<file>:<line>:<column>: <key.path>: <what>`` for a value the YAML constructors could not build.

    A plain ``2026-02-30`` is a date to YAML's resolver, and no date exists for it; quoting makes it
    text. Only datetime's own reasons are worth repeating ("day is out of range for month"); the
    other constructors' exceptions (``KeyError: 'hello'`` for ``!!bool hello``) say nothing to a user.
    """
    node = exc.node
    mark = node.start_mark
    text = str(node.value) if isinstance(node, yaml.ScalarNode) else "this value"
    kind = _KINDS.get(node.tag.rsplit(":", 1)[-1], node.tag)
    if kind == "timestamp" and re.fullmatch(r"\d{4}-\d\d?-\d\d?", text):
        kind = "date"
    reason = f" ({exc.cause})" if kind in ("date", "timestamp") and isinstance(exc.cause, ValueError) else ""
    implicit = isinstance(node, yaml.ScalarNode) and node.style is None
    resolver: Any = loader  # PyYAML's resolver is untyped
    if implicit and resolver.resolve(yaml.ScalarNode, text, (True, False)) == node.tag:
        reason += "; quote it if text is meant"
    path, is_key = _path_to(root, node)
    where = ".".join(path) or "(top level)"
    what = f"{'key ' if is_key else ''}{shown(text)} is no valid YAML {kind}{reason}"
    return f"{source}:{mark.line + 1}:{mark.column + 1}: {where}: {what}"


def _path_to(root: yaml.Node, target: yaml.Node) -> tuple[tuple[str, ...], bool]:
    """The key path of ``target`` in the tree under ``root`` (its first place, in document order),
    and whether ``target`` is a mapping key there (then the path is the mapping's)."""
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        if node is target:
            return path, False
        if id(node) in seen:  # an alias: its node was walked where its anchor is
            continue
        seen.add(id(node))
        children: list[tuple[yaml.Node, tuple[str, ...]]] = []
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if key is target:
                    return path, True
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                children.append((value, (*path, name)))
        elif isinstance(node, yaml.SequenceNode):
            children = [(item, (*path, str(index))) for index, item in enumerate(node.value)]
        stack.extend(reversed(children))  # popped in document order
    return (), False


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
            got = url_shown(got) if isinstance(got, str) else got  # a URL's credentials never echoed
            value = "" if isinstance(got, dict | list) or got is None else f" (got {shown(got)})"
            lines.append(f"{source}: {path}: {message}{value}")
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


def _resolve_paths(config: Config, base_dir: Path, source: str) -> Config:
    """Make every relative path in the configuration relative to the configuration file's directory.

    ``~`` and ``~user`` are expanded here; a user (or a home directory) that does not exist is
    a ConfigError naming the key, every such key at once.
    """
    problems: list[str] = []

    def fix(key: str, path: Path | None) -> Path | None:  # None: unset (or, for ca, the system store)
        if path is None:
            return None
        try:
            path = path.expanduser()
        except RuntimeError:  # pathlib's "Could not determine home directory"
            problems.append(f"{source}: {key}: {str(path.parts[0])!r}: no such user, or no home directory known")
            return path
        return path if path.is_absolute() else (base_dir / path)

    controller, ansible = config.controller, config.ansible
    resolved = config.model_copy(
        update={
            "state_dir": fix("state_dir", config.state_dir),
            "template_dirs": [fix(f"template_dirs.{i}", p) for i, p in enumerate(config.template_dirs)],
            "controller": controller.model_copy(
                update={
                    "ca": fix("controller.ca", controller.ca),
                    "client_cert": fix("controller.client_cert", controller.client_cert),
                    "client_key": fix("controller.client_key", controller.client_key),
                    "join_key": fix("controller.join_key", controller.join_key),
                }
            ),
            "ansible": ansible.model_copy(
                update={
                    "ssh_key": fix("ansible.ssh_key", ansible.ssh_key),
                    "site_dir": fix("ansible.site_dir", ansible.site_dir),
                }
            ),
            "sim": config.sim.model_copy(update={"state_dir": fix("sim.state_dir", config.sim.state_dir)}),
            "terraform": config.terraform.model_copy(
                update={"pg_conn_file": fix("terraform.pg_conn_file", config.terraform.pg_conn_file)}
            ),
            "daemon": config.daemon.model_copy(
                update={
                    "metrics": config.daemon.metrics.model_copy(
                        update={
                            "tls_cert": fix("daemon.metrics.tls_cert", config.daemon.metrics.tls_cert),
                            "tls_key": fix("daemon.metrics.tls_key", config.daemon.metrics.tls_key),
                            "tls_client_ca": fix("daemon.metrics.tls_client_ca", config.daemon.metrics.tls_client_ca),
                        }
                    )
                }
            ),
        }
    )
    if problems:
        raise ConfigError(problems)
    return resolved
