"""Glue between the configuration, the provider working directories and the Terraform engine."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from orchestrator import durable
from orchestrator.clients.terraform.engine import BinaryEngine, BundledEngine, Engine, engine_from_settings
from orchestrator.clients.terraform.mirror import XCESIM, ensure_mirror, plugin_cache_dir
from orchestrator.model.config import Config
from orchestrator.model.hostnames import checked_instance
from orchestrator.model.labels import LabelMap
from orchestrator.model.provider_mirror import credential_secrets
from orchestrator.model.redaction import register
from orchestrator.workspace.pgbackend import ensure_remote_state, refuse_mixed_backends
from orchestrator.workspace.pgconn import PG_CONN_ENV, secrets_of
from orchestrator.workspace.pgsite import pg_site
from orchestrator.workspace.provider_lock import checked_init
from orchestrator.workspace.workdir import ProviderWorkdir

# How long a Terraform command of a pg site waits for a state lock another writer holds (another
# orchestrator, an operator's plan) before it fails: as long as one on the same machine waits for
# the working directory's own lock (ProviderWorkdir.lock), so a second writer waits out a
# shard's apply instead of failing at once.
PG_LOCK_TIMEOUT: Final = 600.0


def terraform_home(config: Config) -> Path:
    """Where the provider mirror, the shared plugin cache and the CLI configuration live."""
    return config.state_dir / "terraform"


def engine_for(
    config: Config, environ: Mapping[str, str] = os.environ, extra_env: Mapping[str, str] | None = None
) -> BundledEngine | BinaryEngine:
    """The configured engine, with the toolkit's provider mirror installed and named (and the site's).

    With ``terraform.backend: pg`` every command gets the connection string as ``PG_CONN_STR`` in
    its environment (ConfigError, one line, when there is none) and waits up to
    :data:`PG_LOCK_TIMEOUT` for a state another writer holds. The connection string and the
    credentials of a network mirror's URL are hidden from every output (and registered for the
    sinks' guard). ``extra_env`` goes into every command's environment too.
    """
    site = pg_site(config, environ)
    conn_str = None if site is None else site.conn_str
    mirror_secrets = credential_secrets(config.terraform.provider_mirror)
    register(mirror_secrets)
    durable.private_dir(config.state_dir)
    home = terraform_home(config)
    cli_config = ensure_mirror(home, [XCESIM], config.terraform.provider_mirror)
    env = {**({PG_CONN_ENV: conn_str} if conn_str else {}), **(extra_env or {})}
    return engine_from_settings(
        config.terraform,
        cli_config=cli_config,
        plugin_cache_dir=plugin_cache_dir(home),
        env=env or None,
        secrets=[*(secrets_of(conn_str) if conn_str else ()), *mirror_secrets],
        lock_timeout=PG_LOCK_TIMEOUT if conn_str else None,
        # Whether the database of Terraform's pg backend answers (asked after a failed command).
        backend_probe=None if site is None else site.unreachable,
    )


def prepared_workdir(engine: Engine, workdir: ProviderWorkdir) -> Path:
    """The provider's working directory, built and initialised when missing or out of date.

    Refused (one line) while its state is not where ``terraform.backend`` says (:mod:`.pgbackend`).
    """
    refuse_mixed_backends(workdir.path, workdir.backend)
    if workdir.is_current() and (workdir.path / ".terraform").is_dir():
        return workdir.path
    with workdir.lock(), workdir.staging() as stage:
        checked_init(engine, stage, root_label(workdir), workdir.site_lock, workdir.backend_config())
        if workdir.backend == "pg":
            ensure_remote_state(engine, stage)
    return workdir.path


def ready_workdir(engine: Engine, workdir: ProviderWorkdir) -> Path:
    """:func:`prepared_workdir`, and its desired set's file written from the record when the
    record is kept elsewhere (the shared store): a rebuilt working directory, or one another
    orchestrator's changes left behind, gives Terraform the record's content
    (``DesiredSet.refresh_cache``). What every Terraform run of the toolkit starts from."""
    path = prepared_workdir(engine, workdir)
    workdir.desired.refresh_cache()
    return path


def root_label(workdir: ProviderWorkdir) -> str:
    """How a problem names the provider root it is about: ``terraform/roots/<module> (provider <name>)``."""
    return f"terraform/roots/{workdir.module} (provider {workdir.provider})"


def instances_output(outputs: dict[str, Any], labels: LabelMap) -> dict[str, dict[str, Any]]:
    """The ``instances`` output of a provider root (key → {id, name, address, launch_time, tags}).

    Each address is checked here, where the cloud's records enter (``model.hostnames``): a
    refused one is "" with ``address_refused`` saying why, so no fact, inventory or known_hosts
    ever holds it. The tags are the cloud's labels read back through ``labels`` (the module's
    label map, ``ProviderWorkdir.labels``): the toolkit's keys.
    """
    value = outputs.get("instances") or {}
    if not isinstance(value, dict):
        return {}
    found = {str(k): checked_instance(v) for k, v in value.items() if isinstance(v, dict)}
    if not labels.identity:
        for inst in found.values():
            if isinstance(inst.get("tags"), dict):
                inst["tags"] = labels.from_labels({str(k): str(v) for k, v in inst["tags"].items()})
    return found
    return {str(k): checked_instance(v) for k, v in value.items() if isinstance(v, dict)}


def images_output(outputs: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The ``images`` output of a provider root (image key → {id, name, instance_id, created_at});
    none when the root has no such output (docs/images.md)."""
    value = outputs.get("images") or {}
    if not isinstance(value, dict):
        return {}
    return {
        str(k): {f: str(v.get(f) or "") for f in ("id", "name", "instance_id", "created_at")}
        for k, v in value.items()
        if isinstance(v, dict)
    }
