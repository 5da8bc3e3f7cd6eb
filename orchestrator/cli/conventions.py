"""What every ``xceprov`` command shares (docs/cli.md): ``-h`` as ``--help``, ``-v`` after the verb.

The group's context settings carry ``-h`` down to every subcommand (click copies the help option
names into each child context). ``-v`` is added to every command below the group, so that
``xceprov plan cpu=1 -v`` is ``xceprov -v plan cpu=1``: the verb's ``-v`` adds to the group's
count before the verb's function runs.
"""

from __future__ import annotations

import logging

import click

from orchestrator.cli.context import CliContext

HELP_OPTION_NAMES = ["-h", "--help"]
VERBOSE_HELP = "More logging; tracebacks on errors (as -v before the verb)."
# ``-q`` of the verbs that run a bootstrap in the foreground (``cli.progress``: hosts=False).
QUIET_HELP = "No per-host progress lines, only each phase's (the results at the end are the same)."


def log_level(verbose: int) -> int:
    """The root logger's level for a ``-v`` count: warnings, then information, then debugging."""
    return logging.DEBUG if verbose > 1 else logging.INFO if verbose else logging.WARNING


def _more_verbose(ctx: click.Context, _param: click.Parameter, count: int) -> None:
    obj = ctx.find_object(CliContext)
    if count and obj is not None:
        obj.verbose += count
        logging.getLogger().setLevel(log_level(obj.verbose))


def add_verbose_option(command: click.Command) -> None:
    """Give ``command`` and every command below it a ``-v/--verbose`` that adds to the group's."""
    command.params.append(
        click.Option(["-v", "--verbose"], count=True, expose_value=False, callback=_more_verbose, help=VERBOSE_HELP)
    )
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            add_verbose_option(sub)
