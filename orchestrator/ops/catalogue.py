"""Reading a provider's flavor catalogue through its module's catalogue root, and keeping it.

A template's ``select:`` picks flavors from its provider's catalogue (``model/catalogue.py``).
The catalogue is read the way the cloud is read everywhere else: by the configured Terraform
engine (offline, from the toolkit's provider mirror and the shared plugin cache), running the
module's catalogue root (``terraform/catalogue/<module>``: data sources and one output,
``flavors``) in its own working directory, ``<state_dir>/catalogue/<cluster>/<provider>/``
(private: it holds the provider's settings). An apply there changes nothing in the cloud; the
output is read as untrusted input (:func:`~orchestrator.model.catalogue.flavors_of`) and kept
in ``flavors.json`` beside it with the time it was read. Later reads use that file until it is
older than ``providers.<name>.catalogue_ttl`` (default 1 h), or the root or the provider's
settings changed, or a refresh is asked for (``xceprov offerings --refresh``). A pass of the
daemon therefore costs a file read; the Terraform run happens once per TTL.

A read that fails (Terraform, the cloud, a malformed output) raises one line naming the
provider; a catalogue kept from before stays as it was (never replaced by a bad one).
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from filelock import FileLock

from orchestrator import durable
from orchestrator.clients.terraform.engine import Engine
from orchestrator.clients.terraform.providers import LOCK_FILE
from orchestrator.errors import ConfigError, TerraformError
from orchestrator.model.catalogue import (
    CatalogueError,
    Flavor,
    Selections,
    flavors_of,
    resolve_selections,
    select_pairs,
)
from orchestrator.model.config import Config
from orchestrator.model.modules import provider_module
from orchestrator.model.offerings import Offering
from orchestrator.paths import toolkit_root
from orchestrator.render.instances import render_settings
from orchestrator.workspace.provider_lock import checked_init, site_lock_path
from orchestrator.workspace.terraform import engine_for

CATALOGUE_DIR: Final = "catalogue"
CACHE_FILE: Final = "flavors.json"
VARS_FILE: Final = "catalogue.tfvars.json"
_STAMP: Final = ".xceprov-source"
# After a failed read, the kept (or no) catalogue serves this long before Terraform runs again.
RETRY_AFTER: Final = 300.0


@dataclass(frozen=True)
class Catalogue:
    """The flavors of one provider's catalogue as read at ``read_at`` (Unix time)."""

    provider: str
    module: str
    flavors: tuple[Flavor, ...]
    read_at: float

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (also the cache file's body, with the digest beside it)."""
        return {
            "provider": self.provider,
            "module": self.module,
            "read_at": self.read_at,
            "flavors": [f.to_json() for f in self.flavors],
        }


def catalogue_root(toolkit_root: Path, module: str) -> Path:
    """The module's catalogue root (``terraform/catalogue/<module>``)."""
    return toolkit_root / "terraform" / "catalogue" / module


def catalogue_dir(config: Config, provider: str) -> Path:
    """The working directory of the provider's catalogue root (not created here)."""
    return config.state_dir / CATALOGUE_DIR / config.cluster / provider


class CatalogueReader:
    """Reads, keeps and hands out the catalogues of a configuration's providers.

    ``engine``: made on first need by ``engine_factory`` (so a pass that finds every catalogue
    fresh never builds one); ``clock``: the Unix time (tests move it without sleeping).
    """

    def __init__(
        self,
        config: Config,
        toolkit_root: Path,
        engine_factory: Callable[[], Engine],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.toolkit_root = toolkit_root
        self._engine_factory = engine_factory
        self._engine: Engine | None = None
        self.clock = clock
        # What the last selections() used, by provider; when a failed read is tried again.
        self.catalogues: dict[str, Catalogue] = {}
        self._failed_until: dict[str, float] = {}
        self._failures: dict[str, str] = {}

    def catalogue(self, provider: str, refresh: bool = False) -> Catalogue:
        """Provider ``provider``'s catalogue: the kept one while fresh, else read now."""
        settings = self.config.providers[provider]
        entry = provider_module(settings.module)
        root = catalogue_root(self.toolkit_root, settings.module)
        if entry is None or not entry.catalogue or not root.is_dir():
            raise ConfigError([f"providers.{provider}: module {settings.module!r} has no flavor catalogue"])
        workdir = catalogue_dir(self.config, provider)
        variables = self._variables(provider)
        digest = self.digest(provider)
        if not refresh:
            kept = self.kept(provider, digest)
            if kept is not None and self.clock() - kept.read_at < settings.catalogue_ttl:
                return kept
        durable.private_tree(self.config.state_dir, CATALOGUE_DIR, self.config.cluster)
        with FileLock(str(workdir) + ".lock", timeout=600, mode=durable.PRIVATE_FILE):
            return self._read(provider, settings.module, root, workdir, variables, digest)

    def _variables(self, provider: str) -> dict[str, Any]:
        return {"settings": render_settings(self.config, provider)}

    def digest(self, provider: str) -> str:
        """What the provider's catalogue depends on (root, settings, the site's lock), as a digest."""
        module = self.config.providers[provider].module
        root = catalogue_root(self.toolkit_root, module)
        return _digest(root, self._variables(provider), site_lock_path(self.config.state_dir, module))

    def selections(self, refresh: bool = False) -> Selections:
        """The offerings of every ``select:`` template, from each provider's catalogue (read when
        older than its TTL, or ``refresh``): what the daemon's pass and ``xceprov offerings`` use.

        A provider whose read fails keeps its last catalogue read with the same root and settings
        (stale beats none: a catalogue changes rarely) and is not read again for
        :data:`RETRY_AFTER` (each pass would otherwise run Terraform); with none kept, its
        templates have no offering there and the problem says why. ``self.catalogues`` holds what was used, by provider.
        """
        catalogues: dict[str, Sequence[Flavor]] = {}
        unread: dict[str, str] = {}
        for provider in sorted({p for _, p in select_pairs(self.config)}):
            try:
                if not refresh and self.clock() < self._failed_until.get(provider, 0.0):
                    raise TerraformError(self._failures[provider])
                found = self.catalogue(provider, refresh)
                self._failed_until.pop(provider, None)
            except (TerraformError, ConfigError) as exc:
                why = _first_line(exc)
                if provider not in self._failed_until or refresh:
                    self._failed_until[provider] = self.clock() + RETRY_AFTER
                    self._failures[provider] = why
                # Only one read with the same settings: another region's flavors would mislead.
                stale = self.kept(provider, self.digest(provider))
                if stale is None:
                    unread[provider] = why
                    continue
                found = stale
            self.catalogues[provider] = found
            catalogues[provider] = found.flavors
        return resolve_selections(self.config, catalogues, unread)

    def kept(self, provider: str, digest: str | None = None) -> Catalogue | None:
        """The catalogue kept in the cache file, None when there is none, it is unreadable or
        (with ``digest``) it was read from another root or other settings."""
        path = catalogue_dir(self.config, provider) / CACHE_FILE
        try:
            doc = durable.parse_json(path.read_text(encoding="utf-8"))
            if digest is not None and doc.get("digest") != digest:
                return None
            read_at = float(doc["read_at"])
            return Catalogue(provider, str(doc["module"]), tuple(flavors_of(doc["flavors"])), read_at)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _read(
        self, provider: str, module: str, root: Path, workdir: Path, variables: Mapping[str, Any], digest: str
    ) -> Catalogue:
        engine = self._engine if self._engine is not None else self._engine_factory()
        self._engine = engine
        where = f"terraform/catalogue/{module} (provider {provider})"
        self._populate(engine, root, workdir, module, where)
        vars_file = workdir / VARS_FILE
        durable.write_json_atomic(vars_file, variables)
        try:
            result = engine.apply(workdir, var_files=[vars_file], auto_approve=True)
            value = result.outputs.get("flavors") if "flavors" in result.outputs else engine.output(workdir)["flavors"]
            flavors = flavors_of(value)
        except (TerraformError, CatalogueError, KeyError) as exc:
            raise TerraformError(f"{where}: the catalogue could not be read: {_first_line(exc)}") from None
        found = Catalogue(provider, module, tuple(flavors), self.clock())
        durable.write_json_atomic(workdir / CACHE_FILE, {**found.to_json(), "digest": digest})
        # Terraform writes its lock and state files with modes of its own: 0600/0700 here too.
        durable.seal(workdir)
        return found

    def _populate(self, engine: Engine, root: Path, workdir: Path, module: str, where: str) -> None:
        """The root's files in ``workdir``, initialised again when they changed."""
        durable.private_dir(workdir)
        source = _digest(root, {}, site_lock_path(self.config.state_dir, module))
        stamp = workdir / _STAMP
        if stamp.is_file() and stamp.read_text().strip() == source and (workdir / ".terraform").is_dir():
            return
        shipped = {file.name for file in root.glob("*.tf")}
        for stale in workdir.glob("*.tf"):  # a file the root no longer has would still be loaded
            if stale.name not in shipped:
                stale.unlink()
        for name in shipped:
            shutil.copyfile(root / name, workdir / name)
        site_lock = site_lock_path(self.config.state_dir, module)
        if site_lock.is_file():  # the providers the site pinned for this module's root
            shutil.copyfile(site_lock, workdir / LOCK_FILE)
        checked_init(engine, workdir, where, site_lock)
        stamp.write_text(source + "\n")


def catalogue_reader(config: Config) -> CatalogueReader:
    """The reader of the configuration's catalogues with the configured Terraform engine (made only
    when a catalogue has to be read). The daemon keeps one and asks ``selections()`` every pass
    (a file read while the catalogues are fresh); ``xceprov offerings`` makes one per run."""
    return CatalogueReader(config, toolkit_root(), lambda: engine_for(config))


def selected_once(config: Config) -> Callable[[], Mapping[tuple[str, str], Sequence[Offering]]]:
    """A command's ``OpParts.selected``: the catalogues read on first need (a create of a
    ``select:`` template), then the same mapping for the rest of the command."""
    return functools.cache(lambda: catalogue_reader(config).selections().selected)


def _digest(root: Path, variables: Mapping[str, Any], site_lock: Path) -> str:
    """What the catalogue read depends on: the root's files, the variables, the site's lock."""
    digest = hashlib.sha256()
    for file in sorted(root.glob("*.tf")):
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    digest.update(json.dumps(variables, sort_keys=True, default=str).encode())
    if site_lock.is_file():
        digest.update(site_lock.read_bytes())
    return digest.hexdigest()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
