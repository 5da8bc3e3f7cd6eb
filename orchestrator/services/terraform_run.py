"""``xceprov terraform run PROVIDER [--shard N] ARGS...``: Terraform itself, for debugging.

Runs the configured engine (the bundled Terraform by default) in one provider's working
directory (one shard of it) with the environment every toolkit command gives it: the provider
mirror and plugin cache, the CLI configuration, the pg backend's connection string in the
environment (never on a command line) and its secrets hidden from every output.

What may run:

- read-only commands, at any time, without the lease: ``state list``, ``state show``, ``show``,
  ``output``, ``validate``, ``providers``, ``version``, and ``fmt``, which only checks (it
  always runs ``-check -diff``: the working directory's ``*.tf`` files are the toolkit's own
  copy of the provider root, rewritten whenever the toolkit renders it again);
- state surgery (``state rm``, ``state mv``, ``taint``, ``untaint``) only with ``hold_lease``:
  the command takes the provider's lease (or, standalone, its local lock) as an op would, so no
  daemon or other command changes the provider meanwhile, holds the shard's lock, and is
  audited (``terraform-run``). Refused at once (``LeaseHeld``) when another holder has it;
- nothing else: ``apply``, ``destroy``, ``import``, ``plan``, ``refresh``, ``init``, ``state
  push`` and the rest change the cloud or the state outside the toolkit's ops (whose records,
  facts and fences keep cloud, state and controller in agreement) and are refused with one line
  naming what is allowed.

The working directory is prepared as for any command (built and initialised when missing or
out of date, :func:`orchestrator.workspace.terraform.prepared_workdir`); a shard that does not
exist is refused (``UsageError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from orchestrator.clients.terraform.engine import BinaryEngine, BundledEngine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import TerraformError, UsageError
from orchestrator.services.ops import fenced_session, refuse_when_leased
from orchestrator.workspace.audit import audit
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.terraform import engine_for, prepared_workdir
from orchestrator.workspace.workdir import ProviderWorkdir

# Read-only: run without the lease. Each entry is the command's leading words.
READ_ONLY: Final = (
    ("state", "list"),
    ("state", "show"),
    ("show",),
    ("output",),
    ("validate",),
    ("fmt",),
    ("providers",),
    ("version",),
)
# State surgery: only while this command holds the provider's lease (``--hold-lease``).
UNDER_LEASE: Final = (("state", "rm"), ("state", "mv"), ("taint",), ("untaint",))
# Flags that would take Terraform out of the working directory, or make fmt write.
_REFUSED_FLAGS: Final = ("-chdir", "-write=true", "-write")


def _names(commands: Sequence[tuple[str, ...]]) -> str:
    return ", ".join(" ".join(c) for c in commands)


@dataclass(frozen=True)
class TerraformRun:
    """What Terraform printed (secrets hidden) and its exit code, in ``workdir``."""

    workdir: Path
    command: str
    returncode: int
    stdout: str
    stderr: str

    def failure(self) -> TerraformError | None:
        """The error to exit with when Terraform exited non-zero (its own output is printed first)."""
        if self.returncode == 0:
            return None
        return TerraformError(f"terraform {self.command} in {self.workdir} exited with code {self.returncode}")


def command_of(args: Sequence[str], hold_lease: bool) -> tuple[tuple[str, ...], bool]:
    """The command ``args`` start with and whether it changes the state; ``UsageError`` (one line
    naming what is allowed) for anything else."""
    words = tuple(a for a in args if not a.startswith("-"))
    read_only = next((c for c in READ_ONLY if words[: len(c)] == c), None)
    leased = next((c for c in UNDER_LEASE if words[: len(c)] == c), None)
    command = read_only or leased
    if command is None:
        asked = " ".join(words[:2]) or "(nothing)"
        raise UsageError(
            f"terraform {asked}: not run by xceprov terraform run; read-only: {_names(READ_ONLY)}; "
            f"with --hold-lease: {_names(UNDER_LEASE)} (change instances with plan/apply, return and orphans)"
        )
    if leased is not None and not hold_lease:
        raise UsageError(
            f"terraform {' '.join(leased)} changes the provider's state: add --hold-lease to run it "
            "holding the provider's lease (no daemon or other command changes the provider meanwhile)"
        )
    bad = next((a for a in args if a.split("=", 1)[0] == "-chdir" or a in _REFUSED_FLAGS), None)
    if bad is not None:
        raise UsageError(f"terraform {' '.join(command)}: {bad} is not allowed (it runs in the shard's directory only)")
    return command, leased is not None


def run_terraform(
    loaded: LoadedConfig,
    toolkit_root: Path,
    provider: str,
    shard: int,
    args: Sequence[str],
    *,
    hold_lease: bool = False,
    engine: BundledEngine | BinaryEngine | None = None,
) -> TerraformRun:
    """Run ``terraform ARGS`` in shard ``shard`` of ``provider`` (see the module docs)."""
    config = loaded.config
    command, writes = command_of(args, hold_lease)
    workdir = _shard(loaded, toolkit_root, provider, shard)
    argv = list(args)
    if command == ("fmt",):
        at = argv.index("fmt") + 1
        argv[at:at] = ["-check", "-diff"]
    if not writes:
        engine = engine or engine_for(config)
        return _run(engine, prepared_workdir(engine, workdir), command, argv)
    refuse_when_leased(loaded, [provider])
    engine = engine or engine_for(config)
    with fenced_session(loaded, [provider], toolkit_root, engine=engine):
        path = prepared_workdir(engine, workdir)
        with workdir.lock():
            done = _run(engine, path, command, argv)
    audit(
        config.state_dir,
        "terraform-run",
        provider=provider,
        shard=shard,
        args=list(args),
        returncode=done.returncode,
    )
    return done


def _shard(loaded: LoadedConfig, toolkit_root: Path, provider: str, index: int) -> ProviderWorkdir:
    if provider not in loaded.config.providers:
        known = ", ".join(sorted(loaded.config.providers))
        raise UsageError(f"unknown provider {provider!r} (configured in {loaded.source}: {known})")
    shards = ProviderShards(loaded.config, provider, toolkit_root).all()
    found = next((s for s in shards if s.index == index), None)
    if found is None:
        have = ", ".join(str(s.index) for s in shards)
        raise UsageError(f"provider {provider} has no shard {index} (its shards: {have})")
    return found


def _run(engine: BundledEngine | BinaryEngine, path: Path, command: tuple[str, ...], argv: list[str]) -> TerraformRun:
    done = engine.run(path, argv)
    return TerraformRun(path, " ".join(command), done.returncode, done.stdout, done.stderr)
