"""Entry point of ``xceprov``: global options, error presentation, and verb registration.

Errors the toolkit raises on purpose (``XceprovError``) are shown as their one-line message with
their exit code; anything else is a bug and is shown as one line too, with the traceback only
under ``-v``.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any, TextIO

import click

from orchestrator.cli import apply as apply_verb
from orchestrator.cli import bootstrap as bootstrap_verb
from orchestrator.cli import breaker as breaker_verb
from orchestrator.cli import completion as completion_verb
from orchestrator.cli import cost as cost_verb
from orchestrator.cli import daemon as daemon_verb
from orchestrator.cli import destroy as destroy_verb
from orchestrator.cli import explain as explain_verb
from orchestrator.cli import image as image_verbs
from orchestrator.cli import init as init_verb
from orchestrator.cli import offerings as offerings_verb
from orchestrator.cli import ops as ops_verb
from orchestrator.cli import orphans as orphans_verb
from orchestrator.cli import plan as plan_verb
from orchestrator.cli import provider as provider_verbs
from orchestrator.cli import record as record_verb
from orchestrator.cli import replay as replay_verb
from orchestrator.cli import ret as return_verb
from orchestrator.cli import sim as sim_verbs
from orchestrator.cli import status as status_verb
from orchestrator.cli import terraform as terraform_verbs
from orchestrator.cli import validate as validate_verb
from orchestrator.cli.context import CliContext
from orchestrator.cli.conventions import HELP_OPTION_NAMES, add_verbose_option, log_level
from orchestrator.durable import permission_problem
from orchestrator.errors import XceprovError
from orchestrator.model.redaction import HidingFormatter, hide_known
from orchestrator.model.text import printable


class XceprovGroup(click.Group):
    """A click group that turns toolkit errors into one line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except XceprovError as exc:
            _report(ctx, str(exc), exc)
            sys.exit(exc.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("xceprov: interrupted", err=True)
            sys.exit(130)
        except PermissionError as exc:
            # A file this user may not use (one root made below a state_dir it can enter): the
            # system's answer, not a bug; one line naming it, exit 1 (docs/exit-codes.md).
            _report(ctx, permission_problem(exc), exc)
            sys.exit(1)
        except Exception as exc:
            _report(ctx, f"internal error: {type(exc).__name__}: {exc} (run with -v for the traceback)", exc)
            sys.exit(70)


def _report(ctx: click.Context, message: str, exc: BaseException) -> None:
    obj = ctx.find_object(CliContext)
    # hide_known: a database password a message quotes (in any form) is never printed.
    if obj is not None and obj.verbose:
        sys.stderr.write(hide_known("".join(traceback.format_exception(exc))))
    for line in hide_known(message).splitlines() or [""]:
        click.echo(f"xceprov: {printable(line)}", err=True)


class CurrentStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Log lines to ``sys.stderr`` as it is when a line is written, not when the handler was made.

    The command line may run more than once in one process (an embedding program, the tests'
    click runner), each time with its own stderr; a handler bound to the first one would write
    to a closed stream ever after.
    """

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        """StreamHandler's constructor sets a stream; the current stderr is always used instead."""


EXIT_CODES_DOC = "docs/exit-codes.md"


@click.group(
    cls=XceprovGroup,
    context_settings={"help_option_names": HELP_OPTION_NAMES},  # every subcommand inherits -h
    # \b keeps click from rewrapping the line (it would break the path at its hyphen).
    epilog=f"\b\nExit codes: 0 done; every other one, and what to do, in {EXIT_CODES_DOC}",
)
@click.option(
    "--config",
    "config_path",
    metavar="FILE",
    help="Site configuration (default: $XCEPROV_CONFIG, ./xceprov.yaml, built-in).",
)
@click.option("-v", "--verbose", count=True, help="More logging; tracebacks on errors.")
@click.version_option(package_name="xce-provisioner")
@click.pass_context
def cli(ctx: click.Context, config_path: str | None, verbose: int) -> None:
    """xceprov: cloud-burst provisioner of the XCE batch scheduler."""
    handler = CurrentStderrHandler()
    # A database password a message quotes (in any form) is never printed.
    handler.setFormatter(HidingFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")))
    logging.basicConfig(level=log_level(verbose), handlers=[handler])
    ctx.obj = CliContext(config_path=config_path, verbose=verbose)


# Verbs live in their own modules; registering them here keeps main.py free of logic. Verb
# modules import their services inside the command function, so that `--help` and light verbs
# do not load heavy dependencies (the Terraform engine is a 64 MB library).
for _verb in (
    apply_verb.apply,
    bootstrap_verb.bootstrap,
    breaker_verb.breaker,
    completion_verb.completion,
    cost_verb.cost,
    daemon_verb.daemon,
    destroy_verb.destroy,
    explain_verb.explain,
    image_verbs.image,
    init_verb.init,
    offerings_verb.offerings,
    ops_verb.ops,
    orphans_verb.orphans,
    plan_verb.plan,
    provider_verbs.provider,
    record_verb.record,
    replay_verb.replay,
    return_verb.return_,
    sim_verbs.sim,
    status_verb.status,
    terraform_verbs.terraform,
    validate_verb.validate,
):
    add_verbose_option(_verb)  # `xceprov VERB ... -v` as `xceprov -v VERB ...` (docs/cli.md)
    cli.add_command(_verb)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="xceprov")
