"""``xceprov terraform lock``: pin the provider versions of every provider root the site uses.

For each root (``terraform/roots/<module>`` of a configured provider) it runs ``terraform
providers lock`` on a throw-away copy, with the site's existing lock in it, and writes the
result to the site's lock (:mod:`orchestrator.workspace.provider_lock`). The toolkit's own
providers are locked from the toolkit's mirror (for its one platform), every other provider
from ``terraform.provider_mirror`` or, without one, its registry.

An existing lock keeps its versions: a run only adds checksums (new platforms, new providers).
Moving a version takes ``--upgrade``, which says every change; nothing is replaced silently.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator import durable
from orchestrator.clients.terraform.mirror import LOCAL_PROVIDERS, MIRROR_DIR, PLATFORM
from orchestrator.clients.terraform.providers import (
    LOCK_FILE,
    changed,
    install_problems,
    lock,
    lock_env,
    parse_lock,
    read_lock,
    required_providers,
)
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import TerraformError, UsageError
from orchestrator.workspace.pgbackend import BACKEND_TF
from orchestrator.workspace.terraform import engine_for, terraform_home
from orchestrator.workspace.workdir import ProviderWorkdir

_PLATFORM = re.compile(r"^[a-z0-9]+_[a-z0-9]+$")
# The lock is no secret and a site may keep it under version control: readable like a source file.
LOCK_MODE = 0o644


@dataclass
class LockReport:
    """Per root: the lock file written, its providers, and the versions that moved (one line each)."""

    written: list[str] = field(default_factory=list)
    locked: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)


def lock_site(
    loaded: LoadedConfig, toolkit_root: Path, platforms: Sequence[str] = (), upgrade: bool = False
) -> LockReport:
    """Write (or complete) the site's provider lock of every provider root its configuration uses."""
    for platform in platforms:
        if not _PLATFORM.match(platform):
            raise UsageError(f"--platform {platform!r}: not an OS_ARCH pair such as linux_arm64")
    config = loaded.config
    engine = engine_for(config)
    # The site mirror's credentials, when its URL has any, reach Terraform in its environment only.
    mirror_env = lock_env(config.terraform.provider_mirror)
    mirror_engine = engine_for(config, extra_env=mirror_env) if mirror_env else engine
    local = {provider.source for provider in LOCAL_PROVIDERS}
    own_mirror = str(terraform_home(config).resolve() / MIRROR_DIR)
    roots: dict[str, ProviderWorkdir] = {}
    for name in sorted(config.providers):
        workdir = ProviderWorkdir(config, name, toolkit_root)
        roots.setdefault(workdir.module, workdir)
    report = LockReport()
    for module, workdir in sorted(roots.items()):
        label = f"terraform/roots/{module}"
        old = read_lock(workdir.site_lock)
        with tempfile.TemporaryDirectory(prefix="xceprov-lock-") as tmp:
            stage = Path(tmp)
            workdir.populate(stage)
            # Terraform lists the requirements only of a root whose lock matches what is installed,
            # and of one without a backend to initialise first (a pg site's generated block).
            (stage / LOCK_FILE).unlink(missing_ok=True)
            (stage / BACKEND_TF).unlink(missing_ok=True)
            try:
                required = required_providers(engine, stage)
                if workdir.site_lock.is_file() and not upgrade:
                    shutil.copyfile(workdir.site_lock, stage / LOCK_FILE)
                lock(engine, stage, [a for a in required if a in local], [PLATFORM], own_mirror)
                others = [a for a in required if a not in local]
                lock(mirror_engine, stage, others, platforms, config.terraform.provider_mirror)
            except TerraformError as exc:
                raise TerraformError("\n".join(f"{label}: {line}" for line in install_problems(str(exc)))) from None
            new_text = (stage / LOCK_FILE).read_bytes() if (stage / LOCK_FILE).is_file() else b""
        new = parse_lock(new_text.decode("utf-8"))
        for address, before, after in changed(old, new):
            if before is not None:
                report.moved.append(f"{label}: provider {address}: {before} -> {after}")
        report.locked.extend(f"{label}: provider {a} {v.version}" for a, v in sorted(new.items()))
        durable.write_bytes_atomic(workdir.site_lock, new_text, LOCK_MODE)
        report.written.append(str(workdir.site_lock))
    return report
