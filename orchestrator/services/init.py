"""``xceprov init``: write a commented starting ``xceprov.yaml`` (docs/cli.md, "xceprov init").

The starting files are package data (``orchestrator/defaults``): the simulated world's is the
built-in configuration itself, so what ``init`` writes is exactly what runs without a file, now
in a file a site can edit; a real provider's is a skeleton whose site-specific values are marked
``CHANGE-ME`` (``model.values.PLACEHOLDER``), which the configuration reader refuses, naming
each key, until every one is replaced. An existing file is never overwritten: the file is
created exclusively, so two ``init`` racing for one directory cannot both write it.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from orchestrator.configfile import DEFAULT_NAME
from orchestrator.errors import FinalError
from orchestrator.model.values import PLACEHOLDER

# What --provider takes, and the package data file each writes.
STARTERS = {"sim": DEFAULT_NAME, "aws": "init-aws.yaml", "openstack": "init-openstack.yaml"}

_SIM_HEADER = """\
# xceprov.yaml: the embedded simulated world (written by `xceprov init`), the built-in
# configuration in a file of its own. Relative paths are this directory's: `xceprov sim up`
# makes the world's CA, keys and cloud under .xceprov/ here. Every key: docs/configuration.md;
# a real provider's starting file: `xceprov init --provider aws|openstack`.
"""


@dataclass(frozen=True)
class Written:
    """The file ``init`` wrote, and the key paths of the values left for the site to fill in."""

    path: Path
    provider: str
    to_fill: list[str]


def starting_text(provider: str) -> str:
    """The commented starting configuration for ``provider`` (one of ``STARTERS``)."""
    text = resources.files("orchestrator.defaults").joinpath(STARTERS[provider]).read_text(encoding="utf-8")
    if provider != "sim":
        return text
    # The built-in file's own first comment says it is the built-in one; here it is the site's.
    body = text.split("\n", 1)[1] if text.startswith("#") else text
    return _SIM_HEADER + body


def marked_keys(data: object, path: tuple[str, ...] = ()) -> list[str]:
    """The key paths (``a.b.0``) of every value holding the ``CHANGE-ME`` mark."""
    if isinstance(data, dict):
        return [k for key, item in data.items() for k in marked_keys(item, (*path, str(key)))]
    if isinstance(data, list):
        return [k for index, item in enumerate(data) for k in marked_keys(item, (*path, str(index)))]
    return [".".join(path)] if isinstance(data, str) and PLACEHOLDER in data else []


def write_starting_config(directory: Path, provider: str = "sim") -> Written:
    """Write ``DIRECTORY/xceprov.yaml`` (the directory is made when missing); never overwrite one.

    FinalError, one line naming the file, when it exists or cannot be written; nothing is written then.
    """
    path = directory / DEFAULT_NAME
    text = starting_text(provider)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # "x": created only if absent, atomically; an existing file (or link) is left untouched.
        with path.open("x", encoding="utf-8") as out:
            out.write(text)
    except FileExistsError:
        raise FinalError(
            f"{path}: already exists; nothing written (xceprov init never overwrites: move it away or give another DIR)"
        ) from None
    except OSError as exc:
        raise FinalError(f"{path}: cannot write: {exc.strerror or exc}") from None
    return Written(path=path, provider=provider, to_fill=marked_keys(yaml.safe_load(text)))
