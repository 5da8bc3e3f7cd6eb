"""The site's provider lock: one Terraform dependency lock file per provider root.

``xceprov terraform lock`` writes ``<state_dir>/terraform/locks/<module>.terraform.lock.hcl``
(docs/provider-modules.md, "Pinned provider versions and mirrors"); every working directory, shard and
throw-away copy of that root gets it as its ``.terraform.lock.hcl``, and the engine initialises
against it read-only. Terraform then never moves a version by itself; a provider that no longer
matches is one line naming the root, the provider and both versions (:func:`checked_init`).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from orchestrator.clients.terraform.engine import Engine
from orchestrator.clients.terraform.providers import (
    LOCK_FILE,
    Locked,
    install_problems,
    read_lock,
    unreachable_registries,
)
from orchestrator.errors import RegistryUnreachable, TerraformError
from orchestrator.workspace.pgbackend import BACKEND_TF

LOCKS_DIR = "locks"


def site_lock_path(state_dir: Path, module: str) -> Path:
    """Where the site's lock file of the provider root ``module`` is kept."""
    return state_dir / "terraform" / LOCKS_DIR / f"{module}{LOCK_FILE}"


def checked_init(
    engine: Engine, stage: Path, root: str, site_lock: Path, backend_config: Mapping[str, str] | None = None
) -> None:
    """``engine.init(stage, backend_config)``; a failure is one line per provider, each starting with ``root``.

    Terraform names the lock copied into ``stage``; a line about it names ``site_lock``, the file
    the site would fix.
    """
    try:
        engine.init(stage, backend_config=backend_config)
    except TerraformError as exc:
        lines = [_about_site_lock(line, site_lock) for line in init_problems(engine, stage, str(exc))]
        # An unreachable registry is an outside service down, not the site's mistake: its own
        # exit code (75), the same whichever verb ran the init (docs/exit-codes.md).
        error = RegistryUnreachable if unreachable_registries(str(exc)) else TerraformError
        raise error("\n".join(f"{root}: {line}" for line in lines)) from None


def _about_site_lock(line: str, site_lock: Path) -> str:
    return f"{site_lock}{line[len(LOCK_FILE) :]}" if line.startswith(f"{LOCK_FILE}:") else line


def init_problems(engine: Engine, stage: Path, error: str) -> list[str]:
    """Why ``stage`` did not initialise: the providers that left the site's lock, else Terraform's reasons."""
    locked = read_lock(stage / LOCK_FILE)
    mismatches = _mismatches(engine, stage, locked) if locked else []
    return mismatches or install_problems(error)


def _mismatches(engine: Engine, stage: Path, locked: dict[str, Locked]) -> list[str]:
    """What an unlocked init of the same configuration selects now, where it differs from the lock."""
    with tempfile.TemporaryDirectory(prefix="xceprov-lockcheck-") as tmp:
        scratch = Path(tmp) / "root"
        # Without the pg backend's block: this throw-away init only asks which versions are offered.
        shutil.copytree(stage, scratch, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*", BACKEND_TF))
        try:
            engine.init(scratch)
        except TerraformError:
            return []  # nothing is offered at all: Terraform's own reasons say why
        offered = read_lock(scratch / LOCK_FILE)
    lines: list[str] = []
    for address, now in sorted(offered.items()):
        was = locked.get(address)
        if was is None:
            lines.append(
                f"provider {address}: not in the site's lock (offered now: {now.version}); run xceprov terraform lock"
            )
        elif was.version != now.version:
            lines.append(
                f"provider {address}: the site's lock holds {was.version}, the mirror and version constraints "
                f"now give {now.version}; xceprov terraform lock --upgrade accepts it"
            )
        elif not now.hashes & was.hashes:
            lines.append(
                f"provider {address}: the site's lock holds {was.version}, the {now.version} package offered now "
                "has other checksums (replaced in the mirror?)"
            )
    return lines
