"""The Terraform commands both engines run: command lines with ``-json`` machine output, parsed
into the typed values of :mod:`.messages` (errors raised as one-line :class:`TerraformError`).

:class:`CliEngine` builds them on :class:`.process.TerraformProcess`, which runs each command;
:mod:`.engine` names the executable (the bundled Terraform or a site's own binary).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform import messages
from orchestrator.clients.terraform.messages import ApplyEventFn, ApplyResult, Diagnostic, PlanResult
from orchestrator.clients.terraform.mirror import cache_lock
from orchestrator.clients.terraform.process import Completed, TerraformProcess
from orchestrator.clients.terraform.providers import LOCK_FILE
from orchestrator.errors import TerraformError, UsageError


class CliEngine(TerraformProcess):
    """Command lines and parsing shared by both engines; subclasses name the executable."""

    # --- operations ----------------------------------------------------------------

    def version(self) -> str:
        """Terraform's version string (``1.15.5``)."""
        done = self.run(Path.cwd(), ["version", "-json"])
        return str(self._json_document(done).get("terraform_version", ""))

    def init(self, workdir: Path, backend_config: Mapping[str, str] | None = None) -> None:
        """``terraform init``; holds the plugin-cache lock, which Terraform itself does not.

        A dependency lock file already in ``workdir`` is the site's (:mod:`.providers`): it is
        used read-only, so a provider that does not match it fails instead of moving it.
        ``backend_config`` completes a partial backend block (``-backend-config=KEY=VALUE``;
        never a secret: those go into the environment).
        """
        done = self._init(workdir, ["init", "-json", "-input=false", "-no-color", *_backend_flags(backend_config)])
        self._check_stream(done)

    def migrate_state(self, workdir: Path, backend_config: Mapping[str, str] | None = None) -> None:
        """``terraform init -migrate-state -force-copy``: the state moves to the backend ``workdir`` now names.

        Without ``-json``, which Terraform refuses together with ``-migrate-state``; an error is
        its first ``Error`` line.
        """
        args = ["init", "-input=false", "-no-color", "-migrate-state", "-force-copy", *_backend_flags(backend_config)]
        done = self._init(workdir, args)
        if done.returncode != 0:
            raise TerraformError(f"{self.name} init -migrate-state in {workdir} failed: {_first_error(done)}")

    def state_pull(self, workdir: Path) -> dict[str, Any]:
        """``terraform state pull``: the raw state document of ``workdir``'s backend ({} when there is none)."""
        done = self.run(workdir, ["state", "pull"])
        if done.returncode != 0:
            raise TerraformError(f"{self.name} state pull in {workdir} failed: {_first_error(done)}")
        if not done.stdout.strip():
            return {}
        return self._json_document(done)

    def state_push(self, workdir: Path, state: Mapping[str, Any]) -> None:
        """``terraform state push``: ``state`` becomes ``workdir``'s state (never ``-force``).

        Terraform refuses a state of another lineage, or of an older serial, over one that holds
        anything: a push never overwrites work.
        """
        fd, name = tempfile.mkstemp(prefix=".push-", suffix=".tfstate", dir=workdir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(state, handle)
            done = self.run(workdir, ["state", "push", f"-lock-timeout={self.lock_timeout:g}s", Path(name).name])
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
        if done.returncode != 0:
            raise TerraformError(f"{self.name} state push in {workdir} failed: {_first_error(done)}")

    def _init(self, workdir: Path, args: list[str]) -> Completed:
        if (Path(workdir) / LOCK_FILE).is_file():
            args.append("-lockfile=readonly")
        if self.plugin_cache_dir is not None:
            with cache_lock(self.plugin_cache_dir):
                return self.run(workdir, args)
        return self.run(workdir, args)

    def plan(
        self,
        workdir: Path,
        var_files: Sequence[Path] = (),
        out: Path | None = None,
        refresh_only: bool = False,
        destroy: bool = False,
    ) -> PlanResult:
        """``terraform plan -json -detailed-exitcode``; raises TerraformError on error diagnostics.

        Relative ``var_files`` and ``out`` are relative to ``workdir``, as with ``-chdir``.
        """
        if refresh_only and destroy:
            raise UsageError("a plan cannot be both refresh-only and destroy")
        args = ["plan", "-json", "-input=false", "-detailed-exitcode", *self._common_flags()]
        if refresh_only:
            args.append("-refresh-only")
        if destroy:
            args.append("-destroy")
        args += [f"-var-file={vf}" for vf in var_files]
        if out is not None:
            args.append(f"-out={out}")
        done = self.run(workdir, args)
        stream = messages.parse_lines(done.stdout)
        if done.returncode not in (0, 2):
            messages.raise_for_errors(messages.diagnostics(stream), fallback=done.stderr or done.stdout)
            raise TerraformError(f"{self.name} plan failed with exit code {done.returncode}")
        return messages.plan_result(stream, exit_code=done.returncode, plan_file=str(out) if out is not None else None)

    def apply(
        self,
        workdir: Path,
        plan_file: Path | None = None,
        var_files: Sequence[Path] = (),
        auto_approve: bool = True,
        should_stop: Callable[[], bool] | None = None,
        on_event: ApplyEventFn | None = None,
    ) -> ApplyResult:
        """``terraform apply -json``; ``on_event`` gets each resource step and diagnostic as it comes.

        A saved plan that no longer fits the state raises StaleState; other errors raise
        :class:`.messages.ApplyFailed`, whose ``result`` lists what was completed anyway.
        When ``should_stop`` (polled every ``poll_interval`` seconds) returns True, Terraform
        is interrupted once, gracefully, and the result of what it completed is returned with
        ``interrupted=True`` (the halt's own errors are in ``diagnostics``, not raised).
        """
        if plan_file is None and not auto_approve:
            raise UsageError("apply without a saved plan needs auto_approve (there is no one to ask)")
        args = ["apply", "-json", "-input=false", *self._common_flags()]
        if auto_approve:
            args.append("-auto-approve")
        args += [f"-var-file={vf}" for vf in var_files]
        if plan_file is not None:
            args.append(str(plan_file))
        done = self.run(workdir, args, should_stop=should_stop, on_line=_event_lines(on_event))
        # Raises on error diagnostics, except for the halt we asked for ourselves.
        result = messages.apply_result(messages.parse_lines(done.stdout), interrupted=done.interrupted)
        if done.returncode != 0 and not done.interrupted:
            messages.raise_for_errors((), fallback=done.stderr or done.stdout)
            raise TerraformError(f"{self.name} apply failed with exit code {done.returncode}")
        return result

    def import_resource(self, workdir: Path, address: str, resource_id: str, var_files: Sequence[Path] = ()) -> None:
        """``terraform import``; raises TerraformError (with Terraform's message) when it fails."""
        args = ["import", "-input=false", "-no-color", f"-lock-timeout={self.lock_timeout:g}s"]
        args += [f"-var-file={vf}" for vf in var_files]
        done = self.run(workdir, [*args, address, resource_id])
        if done.returncode != 0:
            raise TerraformError(f"{self.name} import {address} {resource_id} failed: {_first_error(done)}")

    def show_plan(self, workdir: Path, plan_file: Path) -> dict[str, Any]:
        """``terraform show -json PLAN``."""
        return self._json_document(self.run(workdir, ["show", "-json", "-no-color", str(plan_file)]))

    def show_state(self, workdir: Path) -> dict[str, Any]:
        """``terraform show -json`` of the current state (``values`` is absent when it is empty)."""
        return self._json_document(self.run(workdir, ["show", "-json", "-no-color"]))

    def output(self, workdir: Path) -> dict[str, Any]:
        """``terraform output -json`` reduced to name → value."""
        doc = self._json_document(self.run(workdir, ["output", "-json", "-no-color"]))
        return {name: item.get("value") for name, item in doc.items() if isinstance(item, dict)}

    def fmt_check(self, path: Path) -> list[str]:
        """Files under ``path`` that are not in canonical format, as ``path/relative`` strings."""
        path = Path(path)
        if path.is_file():
            cwd, target = path.parent, path.name
        else:
            cwd, target = path, "."
        done = self.run(cwd, ["fmt", "-check", "-recursive", "-list=true", "-write=false", "-no-color", target])
        if done.returncode == 0:
            return []
        listed = [ln.strip() for ln in done.stdout.splitlines() if ln.strip()]
        if done.returncode == 3 and listed:
            return [str(cwd / name) for name in listed]
        diags = [
            Diagnostic(d.severity, d.summary, d.detail, str(cwd / d.filename), d.line) if d.filename else d
            for d in messages.human_diagnostics(done.stderr)
        ]
        messages.raise_for_errors(diags, fallback=done.stderr or f"{self.name} fmt failed")
        raise TerraformError(f"{self.name} fmt failed with exit code {done.returncode}")

    def validate(self, workdir: Path) -> list[Diagnostic]:
        """``terraform validate -json``; needs an initialised ``workdir``."""
        done = self.run(workdir, ["validate", "-json", "-no-color"])
        return list(messages.validate_diagnostics(self._json_document(done, ok=(0, 1))))

    # --- helpers -------------------------------------------------------------------

    def _common_flags(self) -> list[str]:
        return [f"-parallelism={self.parallelism}", f"-lock-timeout={self.lock_timeout:g}s"]

    def _check_stream(self, done: Completed) -> None:
        diags = messages.diagnostics(messages.parse_lines(done.stdout))
        if done.returncode != 0:
            messages.raise_for_errors(diags, fallback=done.stderr or done.stdout)
            raise TerraformError(f"{self.name} {done.argv[len(self.command())]} failed")

    def _json_document(self, done: Completed, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
        if done.returncode in ok:
            try:
                value = json.loads(done.stdout)
            except json.JSONDecodeError:
                value = None
            if isinstance(value, dict):
                return value
        messages.raise_for_errors(
            messages.human_diagnostics(done.stderr), fallback=done.stderr or done.stdout or "no output"
        )
        raise TerraformError(f"{self.name} gave no JSON document (exit code {done.returncode})")


def _backend_flags(backend_config: Mapping[str, str] | None) -> list[str]:
    return [f"-backend-config={key}={value}" for key, value in sorted((backend_config or {}).items())]


def _first_error(done: Completed) -> str:
    """The first ``Error`` line of a human-readable failure (else its first line), at most 300 characters."""
    lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
    return next((ln for ln in lines if ln.startswith("Error")), lines[0] if lines else "")[:300]


def _event_lines(on_event: ApplyEventFn | None) -> Callable[[str], None] | None:
    """A line handler that hands each apply step or diagnostic of a ``-json`` line to ``on_event``."""
    if on_event is None:
        return None

    def on_line(line: str) -> None:
        for message in messages.parse_lines(line):
            event = messages.apply_event(message)
            if event is not None:
                on_event(event)

    return on_line
