"""Provider versions a site pins: Terraform's dependency lock file, made and read.

A site keeps one lock file per provider root (``xceprov terraform lock``, docs/provider-modules.md,
"Pinned provider versions"). This module runs the Terraform commands that make one
(``get``, ``providers``, ``providers lock``), reads a lock file's versions and checksums, and
turns Terraform's provider installation errors into one line per provider.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from orchestrator.clients.terraform import messages
from orchestrator.errors import TerraformError
from orchestrator.model.provider_mirror import is_network, mirror_credentials

LOCK_FILE = ".terraform.lock.hcl"

_PROVIDER_BLOCK = re.compile(r'^provider\s+"([^"]+)"\s*\{(.*?)^\}', re.MULTILINE | re.DOTALL)
_VERSION = re.compile(r'^\s*version\s*=\s*"([^"]*)"', re.MULTILINE)
_HASHES = re.compile(r"^\s*hashes\s*=\s*\[(.*?)\]", re.MULTILINE | re.DOTALL)
_REQUIRED = re.compile(r"provider\[([^\]\s]+)\]")
# "Could not retrieve the list of available versions for provider hashicorp/aws: REASON" and
# "Error while installing xce/xcesim v0.1.0: REASON", as Terraform words its installer errors.
# "- registry.terraform.io/xce/xcesim: REASON" is how `providers lock` lists them.
_PROVIDER_REASON = re.compile(
    r"(?:for provider|while installing|installed: -) ([\w.-]+(?:/[\w.-]+){1,2})(?: v[\w.+-]+)?: (.*)"
)
# A locked version the root's constraints no longer allow; Terraform's advice (init -upgrade) is not ours.
_LOCKED_OUTSIDE = re.compile(r"locked provider \S+ (\S+) does not match configured version constraint (.+?);")
_UNREACHABLE = re.compile(r"could not connect to ([\w.-]+)")
# Terraform's advice that follows each installer error names its own commands, not ours.
_ADVICE = (" To see which modules", " for more information:")


@dataclass(frozen=True)
class Locked:
    """One provider of a lock file: the version selected and the checksums of its packages."""

    version: str
    hashes: frozenset[str]


def parse_lock(text: str) -> dict[str, Locked]:
    """The providers of a dependency lock file, by full source address."""
    found: dict[str, Locked] = {}
    for match in _PROVIDER_BLOCK.finditer(text):
        body = match.group(2)
        version = _VERSION.search(body)
        hashes = _HASHES.search(body)
        listed = re.findall(r'"([^"]+)"', hashes.group(1)) if hashes else []
        found[match.group(1)] = Locked(version.group(1) if version else "", frozenset(listed))
    return found


def read_lock(path: Path) -> dict[str, Locked]:
    """:func:`parse_lock` of ``path``; an absent file locks nothing."""
    try:
        return parse_lock(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


class Outcome(Protocol):
    """What a finished Terraform command tells (the engine's ``Completed``)."""

    @property
    def returncode(self) -> int: ...

    @property
    def stdout(self) -> str: ...

    @property
    def stderr(self) -> str: ...


# Arguments Terraform adds to every ``terraform providers lock`` (its TF_CLI_ARGS_<command>).
LOCK_ARGS_ENV = "TF_CLI_ARGS_providers_lock"


class Runner(Protocol):
    """Runs one Terraform command in a working directory (both engines do)."""

    def run(self, workdir: Path, args: Sequence[str]) -> Outcome:
        """``terraform ARGS`` in ``workdir``."""
        ...


def required_providers(runner: Runner, workdir: Path) -> list[str]:
    """Every provider source address the configuration in ``workdir`` requires (modules installed first)."""
    _checked(runner.run(workdir, ["get", "-no-color"]), "get")
    done = _checked(runner.run(workdir, ["providers", "-no-color"]), "providers")
    return sorted(set(_REQUIRED.findall(done.stdout)))


def lock_env(mirror: str | None) -> dict[str, str]:
    """The environment a runner of :func:`lock` needs for ``mirror``: a network mirror whose URL
    carries credentials is given as ``-net-mirror`` in ``TF_CLI_ARGS_providers_lock`` (Terraform
    adds that variable's arguments to the command's), never on a command line that every user
    of the machine can list. Empty for any other mirror."""
    if mirror is None or mirror_credentials(mirror) is None:
        return {}
    return {LOCK_ARGS_ENV: f"-net-mirror={mirror}"}


def lock(runner: Runner, workdir: Path, addresses: Sequence[str], platforms: Sequence[str], mirror: str | None) -> None:
    """``terraform providers lock`` of ``addresses`` into ``workdir``'s lock file.

    ``mirror`` is where they come from (a directory or an ``https://`` network mirror; None:
    their registries). A lock file already there keeps its versions: Terraform only adds the
    checksums of missing platforms, and fails when a locked version is no longer offered. A
    network mirror whose URL carries credentials must be in the runner's environment
    (:func:`lock_env`): it is not put on the command line.
    """
    if not addresses:
        return
    args = ["providers", "lock", "-no-color", *(f"-platform={p}" for p in platforms)]
    if mirror is not None and not lock_env(mirror):
        args.append(f"-net-mirror={mirror}" if is_network(mirror) else f"-fs-mirror={mirror}")
    _checked(runner.run(workdir, [*args, *addresses]), "providers lock")


def install_problems(error: str) -> list[str]:
    """One line per provider for Terraform's provider installation errors in ``error``.

    ``provider ADDRESS: REASON``; a registry that cannot be reached is said so, with the
    network's reason. Lines that are not about one provider are returned as they are.
    """
    lines: list[str] = []
    for line in (ln.strip() for ln in error.splitlines()):
        if not line:
            continue
        match = _PROVIDER_REASON.search(line)
        if match is None:
            lines.append(line)
            continue
        address, reason = match.group(1), _without_advice(match.group(2))
        outside = _LOCKED_OUTSIDE.search(reason)
        if outside is not None:
            reason = (
                f"the site's lock holds {outside.group(1)}, which the root's version constraints "
                f"({outside.group(2)}) no longer allow; xceprov terraform lock --upgrade selects again"
            )
        unreachable = _UNREACHABLE.search(reason)
        if unreachable is not None:
            cause = reason.rsplit("dial tcp: ", 1)[-1] if "dial tcp: " in reason else reason.rsplit(": ", 1)[-1]
            reason = (
                f"registry {unreachable.group(1)} unreachable ({cause}); "
                "an air-gapped site sets terraform.provider_mirror"
            )
        lines.append(f"provider {address}: {reason}")
    return list(dict.fromkeys(lines))


def unreachable_registries(error: str) -> list[str]:
    """The registries (or network mirrors) Terraform's installer errors in ``error`` could not connect to."""
    return sorted(set(_UNREACHABLE.findall(error)))


def _without_advice(reason: str) -> str:
    for advice in _ADVICE:
        reason = reason.split(advice, 1)[0]
    return reason.strip().rstrip(";").strip()[:400]


def _checked(done: Outcome, what: str) -> Outcome:
    if done.returncode != 0:
        error = messages.error_for(messages.human_diagnostics(done.stderr), fallback=done.stderr or done.stdout)
        raise TerraformError(str(error) if error is not None else f"terraform {what} failed")
    return done


def changed(old: dict[str, Locked], new: dict[str, Locked]) -> Iterable[tuple[str, str | None, str]]:
    """``(address, old version or None, new version)`` of every provider whose version ``new`` moves."""
    for address, locked in sorted(new.items()):
        before = old.get(address)
        if before is None or before.version != locked.version:
            yield address, before.version if before else None, locked.version
