"""What a bake would be built from today: the records an image carries (docs/images.md).

The base image, the collection version (``ansible/galaxy.yml``, one version with the package),
the sha256 of the node manager archive the bake play installs, and a digest of the site roles
the template's play runs (their names and every file). ``validate`` compares an image's records
with these to warn that it is older than what a bake would make now.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from orchestrator.configfile import LoadedConfig
from orchestrator.model.images import NONE, BuiltFrom
from orchestrator.services.bootstrap_sources import SIM_GROUP, SimulatedWorld, simulated_sources

ARCHIVE_SRC = "xce_node_manager_archive_src"
ARCHIVE_CHECKSUM = "xce_node_manager_archive_checksum"


def role_version(toolkit_root: Path) -> str:
    """The collection's version (``ansible/galaxy.yml``), "none" when unreadable."""
    try:
        meta = yaml.safe_load((toolkit_root / "ansible" / "galaxy.yml").read_text())
    except (OSError, yaml.YAMLError):
        return NONE
    return str(meta.get("version") or NONE) if isinstance(meta, dict) else NONE


def file_sha256(path: Path) -> str:
    """The sha256 of a file, hex."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def node_manager_sha256(loaded: LoadedConfig, template: str, world: SimulatedWorld | None) -> str:
    """The archive's sha256: the template's ``xce_node_manager_archive_checksum`` (``sha256:``
    dropped) or ``xce_node_manager_archive_src`` file, else the simulated world's artifact; "none"."""
    variables = loaded.config.templates[template].bootstrap.vars
    checksum = str(variables.get(ARCHIVE_CHECKSUM) or "")
    if checksum:
        return checksum.removeprefix("sha256:")
    source = str(variables.get(ARCHIVE_SRC) or "")
    if not source:
        _loaded, groups = simulated_sources(loaded, world)
        source = str(groups.get(SIM_GROUP, {}).get(ARCHIVE_SRC) or "")
    path = Path(source) if source else None
    return file_sha256(path) if path is not None and path.is_file() else NONE


def site_roles_digest(loaded: LoadedConfig, template: str) -> str:
    """sha256 of the template's site roles, sorted, with every file of each (the site's
    ``roles/`` directory); "none" without site roles."""
    config = loaded.config
    roles = sorted(config.templates[template].bootstrap.roles)
    if not roles:
        return NONE
    digest = hashlib.sha256()
    site = config.ansible.site_dir
    for role in roles:
        digest.update(f"role {role}\n".encode())
        base = site / "roles" / role if site is not None else None
        if base is None or not base.is_dir():
            continue
        for file in sorted(p for p in base.rglob("*") if p.is_file()):
            digest.update(f"file {file.relative_to(base)}\n".encode())
            digest.update(file_sha256(file).encode())
    return digest.hexdigest()


def built_from(
    loaded: LoadedConfig, toolkit_root: Path, template: str, base_image: str, world: SimulatedWorld | None
) -> BuiltFrom:
    """The records of a bake of ``template`` from ``base_image`` made now."""
    return BuiltFrom(
        base_image=base_image,
        role_version=role_version(toolkit_root),
        node_manager_sha256=node_manager_sha256(loaded, template, world),
        site_roles=site_roles_digest(loaded, template),
    )
