"""One Terraform working directory per cluster × provider.

``<state_dir>/work/<cluster>/<provider>/`` holds a copy of the module's root configuration
(``terraform/roots/<module>``), the module itself (``module/``), the desired instance set
(``desired.tfvars.json``: every instance of the provider keyed by instance key, plus the
owner tags and settings) and the local Terraform state. The desired set holds the tags as the
module's cloud labels them (:attr:`ProviderWorkdir.labels`, the registry entry's key map and
value encoding): Terraform gets exactly that document, and every reader of the set, the state
and the listing gets the toolkit's keys back through the same map. One working directory per provider
means one refresh-only plan shows all drift of that provider.

The directory is built in a temporary sibling and renamed into place, so a failure (a bad
module, a Terraform error during ``init``) never leaves a half-written working directory.
Everything under ``<state_dir>/work`` is private (0700 directories, 0600 files): the desired
set and the Terraform state hold module settings and user data. With ``terraform.backend: pg``
the state is not here but in PostgreSQL (:mod:`.pgbackend`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

from orchestrator import durable
from orchestrator.clients.terraform.providers import LOCK_FILE
from orchestrator.errors import ConfigError
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.images import ImageSpec
from orchestrator.model.instances import InstanceSpec
from orchestrator.model.labels import LabelError, LabelMap
from orchestrator.model.modules import ProviderModule, label_refusal, provider_module
from orchestrator.workspace.desired import DESIRED, DesiredSet
from orchestrator.workspace.documents import Document, ProviderDocuments
from orchestrator.workspace.pgbackend import BACKEND_BLOCK, BACKEND_TF, schema_name
from orchestrator.workspace.provider_lock import site_lock_path
from orchestrator.workspace.sharedstore import provider_documents

STAMP = ".xceprov-source"


class ProviderWorkdir:
    """The working directory, desired set and lock of one provider.

    ``documents``: where the provider's desired sets and suspects are kept (default: as the
    configuration says, ``workspace.sharedstore``: the working directory itself, or the shared
    store's rows of the provider, read-only).
    """

    # The shard this directory is (ProviderWorkdir is shard 0; see shards.ShardWorkdir).
    index = 0

    def __init__(
        self, config: Config, provider: str, toolkit_root: Path, documents: ProviderDocuments | None = None
    ) -> None:
        if provider not in config.providers:
            raise ConfigError([f"providers.{provider}: no such provider"])
        self.config = config
        self.provider = provider
        self.module = config.providers[provider].module
        self.path = config.state_dir / "work" / config.cluster / provider
        # Outside the executor (previews, listings) the shared documents are read-only.
        self.documents = documents if documents is not None else provider_documents(config, provider)
        # The host-loss suspects of this working directory (ops.hostloss).
        self.suspects: Document = self.documents.suspects(0)
        self.root_src = toolkit_root / "terraform" / "roots" / self.module
        self.module_src = toolkit_root / "terraform" / "modules" / self.module
        # The site's provider lock of this root (xceprov terraform lock), when it has one.
        self.site_lock = site_lock_path(config.state_dir, self.module)
        if not self.root_src.is_dir() or not self.module_src.is_dir():
            raise ConfigError(
                [
                    f"providers.{provider}.module: no Terraform module {self.module!r} "
                    f"(expected terraform/modules/{self.module} and terraform/roots/{self.module})"
                ]
            )
        entry = provider_module(self.module)
        if entry is None:
            # Without its entry the toolkit would not see the module's hosts drift (no host loss,
            # no ghost orphans) nor read its refusals: refused rather than half-known.
            raise ConfigError(
                [
                    f"providers.{provider}.module: {self.module!r} has no entry in the provider-module "
                    'registry (orchestrator/model/modules.py; CONTRIBUTING.md, "Adding a provider module")'
                ]
            )
        # What the toolkit knows of the module beyond its Terraform (orchestrator/model/modules.py).
        self.entry: ProviderModule = entry
        templates = [name for name, t in sorted(config.templates.items()) if provider in t.providers]
        problem = label_refusal(entry, self.common_tags(), templates)
        if problem is not None:
            raise ConfigError([f"providers.{provider}.module: {problem}"])
        self.desired = DesiredSet(self.path / DESIRED, self.documents.desired(0), self.labels)

    @property
    def labels(self) -> LabelMap:
        """How the module's cloud carries the toolkit's tags (orchestrator/model/labels.py)."""
        return self.entry.labels

    @property
    def backend(self) -> str:
        """Where this directory's Terraform state lives: ``local`` or ``pg`` (``terraform.backend``)."""
        return self.config.terraform.backend

    def backend_config(self) -> dict[str, str]:
        """The ``-backend-config`` values of ``init``: the shard's schema with ``pg``, nothing with ``local``."""
        if self.backend != "pg":
            return {}
        return {"schema_name": schema_name(self.config.cluster, self.provider, self.index)}

    @property
    def desired_file(self) -> Path:
        """The variables file holding every instance this provider should have."""
        return self.desired.path

    def parent_dir(self) -> Path:
        """``<state_dir>/work/<cluster>``, private, created when missing."""
        return durable.private_tree(self.config.state_dir, "work", self.config.cluster)

    def lock(self, timeout: float = 600.0) -> FileLock:
        """Serialises every change to this provider's desired set and state across processes."""
        self.parent_dir()
        return FileLock(str(self.path) + ".lock", timeout=timeout, mode=durable.PRIVATE_FILE)

    def common_tags(self) -> dict[str, str]:
        """The tags the module needs for listing this cluster's objects."""
        return {owner.CLUSTER: self.config.cluster, owner.PROVIDER: self.provider}

    def source_digest(self) -> str:
        """A digest of the shipped root and module files: a change means copy and init again."""
        digest = hashlib.sha256()
        for base in (self.root_src, self.module_src):
            for file in sorted(base.rglob("*.tf")):
                # A module's examples/ teach users; the working directory never loads them.
                if "examples" in file.relative_to(base).parts:
                    continue
                digest.update(str(file.relative_to(base)).encode())
                digest.update(file.read_bytes())
        if self.site_lock.is_file():  # a new or changed site lock: init again against it
            digest.update(LOCK_FILE.encode())
            digest.update(self.site_lock.read_bytes())
        for key, value in sorted(self.backend_config().items()):  # another backend: init again
            digest.update(f"backend {key}={value}".encode())
        return digest.hexdigest()

    def is_current(self) -> bool:
        """True when the working directory exists and was built from the current sources."""
        stamp = self.path / STAMP
        return stamp.is_file() and stamp.read_text().strip() == self.source_digest()

    def populate(self, target: Path) -> None:
        """Copy the root configuration, the module and the site's provider lock into ``target``.

        No state, no variables; with ``terraform.backend: pg`` the generated ``backend.tf``
        (:mod:`.pgbackend`). Without a site lock, ``target`` keeps no lock file either, so
        its ``init`` selects versions as the constraints allow (as before locks were kept).
        """
        target.mkdir(parents=True, exist_ok=True)
        for file in self.root_src.glob("*.tf"):
            shutil.copy2(file, target / file.name)
        if self.site_lock.is_file():
            shutil.copyfile(self.site_lock, target / LOCK_FILE)
        else:
            (target / LOCK_FILE).unlink(missing_ok=True)
        # The one difference a pg site's working directory has from the shipped root.
        if self.backend == "pg":
            (target / BACKEND_TF).write_text(BACKEND_BLOCK)
        else:
            (target / BACKEND_TF).unlink(missing_ok=True)
        module_dir = target / "module"
        if module_dir.exists():
            shutil.rmtree(module_dir)
        shutil.copytree(
            self.module_src, module_dir, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*", "examples")
        )
        (target / STAMP).write_text(self.source_digest() + "\n")

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A fresh copy of the sources in a temporary sibling; the caller inits it, then it is moved in.

        An existing working directory keeps its state and desired set: only the sources are
        refreshed in place after the staged copy proved it initialises.
        """
        parent = self.parent_dir()
        # mkdtemp makes the stage 0700, so the renamed working directory is private too.
        stage = Path(tempfile.mkdtemp(prefix=f".{self.provider}.staging-", dir=parent))
        try:
            self.populate(stage)
            yield stage
            if self.path.exists():
                # Keep state and desired set; refresh sources and the initialised plugins.
                durable.private_dir(self.path)
                self.populate(self.path)
                for item in (".terraform", ".terraform.lock.hcl"):
                    src, dst = stage / item, self.path / item
                    if dst.is_dir():
                        shutil.rmtree(dst)
                    elif dst.exists():
                        dst.unlink()
                    if src.exists():
                        durable.replace(src, dst)
            else:
                durable.replace(stage, self.path)
            # The copied sources keep their shipped modes, and Terraform writes its lock file
            # 0644 whatever the umask: the promise is 0600 files and 0700 directories here.
            durable.seal(self.path)
        finally:
            if stage.exists():
                shutil.rmtree(stage, ignore_errors=True)

    def variables(
        self,
        instances: Mapping[str, InstanceSpec],
        settings: Mapping[str, Any],
        images: Mapping[str, ImageSpec] | None = None,
    ) -> dict[str, Any]:
        """The complete Terraform variables document for a desired set, tags as the cloud's labels.

        ``images``: the baked images the set keeps (docs/images.md); None keeps those of the
        current desired set, so that no op on the instances ever plans an image's deletion.
        Only shard 0 holds images; the key is left out when there are none (the modules default
        it to none, so a desired set from before images existed plans as it did).

        A tag the labels cannot carry was refused where the instance was rendered; one met here
        (a desired set written under another map) is refused the same way, naming the provider.
        """
        labels = self.labels
        entries = {key: spec.terraform_value() for key, spec in sorted(instances.items())}
        common = self.common_tags()
        kept = self.desired.images() if images is None and self.index == 0 else (images or {})
        image_entries = {key: spec.terraform_value() for key, spec in sorted(kept.items())}
        if not labels.identity:
            common = self._labelled("common_tags", common)
            for key, entry in entries.items():
                entry["tags"] = self._labelled(f"instance {key}", entry["tags"])
            for key, entry in image_entries.items():
                entry["tags"] = self._labelled(f"image {key}", entry["tags"])
        document: dict[str, Any] = {"instances": entries, "common_tags": common, "settings": dict(settings)}
        if image_entries:
            document["images"] = image_entries
        return document

    def _labelled(self, where: str, tags: Mapping[str, str]) -> dict[str, str]:
        try:
            return self.labels.to_labels(tags)
        except LabelError as exc:
            raise ConfigError([f"providers.{self.provider}: {where}: {exc}"]) from None

    @contextlib.contextmanager
    def candidate_var_file(self, variables: Mapping[str, Any], directory: Path | None = None) -> Iterator[Path]:
        """A temporary variables file for a plan (0600, like every file here), removed afterwards;
        in ``directory`` (an op's scratch, ``workspace.scratch``) or the working directory."""
        directory = durable.private_dir(directory if directory is not None else self.path)
        fd, name = tempfile.mkstemp(prefix=".candidate-", suffix=".tfvars.json", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(variables, handle)
            yield Path(name)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
