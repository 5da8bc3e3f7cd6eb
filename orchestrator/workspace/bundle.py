"""Plan bundles: what ``xceprov plan --out DIR`` saves and ``xceprov apply DIR`` applies.

A bundle is a directory holding one saved Terraform plan per provider (``<provider>.tfplan``)
and ``manifest.json`` (format, cluster, creation time, configuration source, and the plan file
of each provider). Saved plans hold the module settings and every instance's user data, so the
directory is 0700 and every file in it 0600, whatever the umask. The manifest is written last
(atomically): a directory without one is not a bundle, so a plan that failed half-way can never
be applied. Each provider's entry also names the instance keys the preview showed as lost
(``lost``; absent in bundles of earlier versions, read as none): ``xceprov apply`` refuses the
bundle when its own read-only observation finds other losses.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import durable
from orchestrator.errors import UsageError

BUNDLE_FORMAT = 1
MANIFEST = "manifest.json"
PLAN_SUFFIX = ".tfplan"


@dataclass(frozen=True)
class BundleEntry:
    """One provider's saved plan in a bundle."""

    provider: str
    plan_file: Path
    lost: frozenset[str] = frozenset()


def create_bundle(out: Path) -> Path:
    """Make ``out`` a new, private bundle directory; it must be absent or an empty directory."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: exists and is not an empty directory")
    return durable.private_dir(out)


def plan_path(out: Path, provider: str) -> Path:
    """Where the saved plan of ``provider`` goes in bundle ``out`` (absolute: Terraform runs elsewhere)."""
    return (out / f"{provider}{PLAN_SUFFIX}").resolve()


def seal_bundle(
    out: Path, cluster: str, source: str, plans: dict[str, Path], lost: Mapping[str, Sequence[str]] | None = None
) -> None:
    """Narrow every saved plan to 0600 and write the manifest, which makes ``out`` a bundle.

    ``lost``: per provider, the instance keys the preview showed as lost.
    """
    lost = lost or {}
    for plan_file in plans.values():
        # Terraform creates the plan with the process umask (usually 0644).
        os.chmod(plan_file, durable.PRIVATE_FILE)
    durable.write_json_atomic(
        out / MANIFEST,
        {
            "format": BUNDLE_FORMAT,
            "cluster": cluster,
            "created": time.time(),
            "config": source,
            "providers": [
                {"name": name, "plan_file": plan_file.name, "lost": sorted(lost.get(name, ()))}
                for name, plan_file in plans.items()
            ],
        },
    )


def discard_bundle(out: Path) -> None:
    """Remove a bundle that could not be completed."""
    shutil.rmtree(out, ignore_errors=True)


def read_bundle(bundle: Path, cluster: str) -> list[BundleEntry]:
    """The providers and plan files of ``bundle``, checked against this configuration's cluster."""
    manifest = _manifest(bundle)
    where = bundle / MANIFEST
    if manifest.get("format") != BUNDLE_FORMAT:
        raise UsageError(f"{where}: unsupported format {_shown(manifest.get('format'))}")
    if manifest.get("cluster") != cluster:
        planned = _shown(manifest.get("cluster"))
        raise UsageError(f"{bundle}: planned for cluster {planned}, configuration is {cluster!r}")
    providers = manifest.get("providers")
    if not isinstance(providers, list):
        raise UsageError(f"{where}: 'providers' must be a list")
    entries: list[BundleEntry] = []
    for item in providers:
        name = item.get("name") if isinstance(item, dict) else None
        plan_file = item.get("plan_file") if isinstance(item, dict) else None
        # A plan file is a bare name inside the bundle: a manifest cannot point elsewhere.
        lost = item.get("lost", []) if isinstance(item, dict) else None
        if not isinstance(name, str) or not _is_plan_name(plan_file):
            raise UsageError(f"{where}: malformed provider entry {_shown(item)}")
        if not isinstance(lost, list) or not all(isinstance(key, str) for key in lost):
            raise UsageError(f"{where}: provider {_shown(name)}: 'lost' must be a list of instance keys")
        if any(entry.provider == name for entry in entries):
            # Applied twice, the second apply would run a plan the first one made stale.
            raise UsageError(f"{where}: provider {_shown(name)} is listed twice")
        entries.append(BundleEntry(name, (bundle / str(plan_file)).resolve(), frozenset(lost)))
    return entries


def _is_plan_name(plan_file: object) -> bool:
    """A plan file is a bare ``<name>.tfplan`` inside the bundle: a manifest cannot point elsewhere
    (``..``, a path, the manifest itself) nor hold what no file name can (NUL)."""
    return (
        isinstance(plan_file, str)
        and plan_file.endswith(PLAN_SUFFIX)
        and Path(plan_file).name == plan_file
        and "\0" not in plan_file
    )


def _shown(value: object) -> str:
    """A manifest value for an error line: escaped and at most 100 characters."""
    text = repr(value)
    return text if len(text) <= 100 else f"{text[:100]}..."


def _manifest(bundle: Path) -> dict[str, Any]:
    try:
        manifest = durable.parse_json((bundle / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"{bundle}: not a plan bundle (no {MANIFEST}); make one with xceprov plan --out") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{bundle / MANIFEST}: unreadable: {exc}") from None
    if not isinstance(manifest, dict):
        raise UsageError(f"{bundle / MANIFEST}: not a JSON object")
    return manifest
