"""``xceprov init``: write a commented starting ``xceprov.yaml`` (docs/cli.md, "xceprov init").

The starting files are package data (``orchestrator/defaults``): the simulated world's is the
built-in configuration itself, so what ``init`` writes is exactly what runs without a file, now
in a file a site can edit; a real provider's is a skeleton whose site-specific values are marked
``CHANGE-ME`` (``model.values.PLACEHOLDER``), which the configuration reader refuses, naming
each key, until every one is replaced. An existing file is never overwritten: the file is
created exclusively, so two ``init`` racing for one directory cannot both write it.

The simulated world's file names its controller at the built-in port (7441) and, for the hosts,
at the gateway of the built-in lab (10.213.0.1). A second world on the same machine needs both
elsewhere; ``init`` writes them (``--controller-port``, ``--lab-subnet``) so that the file and
``sim up --lab-subnet`` agree without the site editing the file (docs/simulated-world.md).
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

# The built-in file's controller addresses: for the orchestrator (loopback) and for the hosts (the
# built-in lab's gateway). ``sim_world_text`` rewrites exactly these two.
_BUILTIN_PORT = 7441
_BUILTIN_LOOPBACK = f'"127.0.0.1:{_BUILTIN_PORT}"'
_BUILTIN_GATEWAY = "10.213.0.1"

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


@dataclass(frozen=True)
class SimWorld:
    """Where the simulated world's controller is: its port and the lab gateway the hosts reach it at."""

    controller_port: int = _BUILTIN_PORT
    lab_gateway: str = _BUILTIN_GATEWAY


def sim_world_text(text: str, world: SimWorld) -> str:
    """The simulated world's file ``text`` with its controller at ``world``'s port and gateway."""
    worker = f'"{_BUILTIN_GATEWAY}:{_BUILTIN_PORT}"'
    # Each appears once in the package's file; a change there must not leave a file half-moved.
    if text.count(_BUILTIN_LOOPBACK) != 1 or text.count(worker) != 1:
        raise FinalError(f"{DEFAULT_NAME} in the package: no single {_BUILTIN_LOOPBACK} and {worker} to rewrite")
    port = world.controller_port
    return text.replace(_BUILTIN_LOOPBACK, f'"127.0.0.1:{port}"').replace(worker, f'"{world.lab_gateway}:{port}"')


def starting_text(provider: str, world: SimWorld | None = None) -> str:
    """The commented starting configuration for ``provider`` (one of ``STARTERS``); ``world``
    (the simulated world's file only) moves its controller."""
    text = resources.files("orchestrator.defaults").joinpath(STARTERS[provider]).read_text(encoding="utf-8")
    if provider != "sim":
        return text
    # The built-in file's own first comment says it is the built-in one; here it is the site's.
    body = text.split("\n", 1)[1] if text.startswith("#") else text
    return _SIM_HEADER + (body if world is None else sim_world_text(body, world))


def marked_keys(data: object, path: tuple[str, ...] = ()) -> list[str]:
    """The key paths (``a.b.0``) of every value holding the ``CHANGE-ME`` mark."""
    if isinstance(data, dict):
        return [k for key, item in data.items() for k in marked_keys(item, (*path, str(key)))]
    if isinstance(data, list):
        return [k for index, item in enumerate(data) for k in marked_keys(item, (*path, str(index)))]
    return [".".join(path)] if isinstance(data, str) and PLACEHOLDER in data else []


def write_starting_config(directory: Path, provider: str = "sim", world: SimWorld | None = None) -> Written:
    """Write ``DIRECTORY/xceprov.yaml`` (the directory is made when missing); never overwrite one.
    ``world``: where the simulated world's controller is (``provider`` sim only).

    FinalError, one line naming the file, when it exists or cannot be written; nothing is written then.
    """
    path = directory / DEFAULT_NAME
    text = starting_text(provider, world)
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
