"""``xceprov completion SHELL``: print the shell's completion script for ``xceprov``.

Click completes any click program when it is run with ``_XCEPROV_COMPLETE=<shell>_source``;
this verb prints the same script, so that a site need not know click's variable
(docs/cli.md, "Shell completion"). The script calls ``xceprov`` back at each Tab with
``_XCEPROV_COMPLETE=<shell>_complete``: completions always follow the installed command tree.
"""

from __future__ import annotations

import click
from click.shell_completion import get_completion_class

# The shells click ships a completion class for (``click.shell_completion``).
SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_XCEPROV_COMPLETE"


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
@click.pass_context
def completion(ctx: click.Context, shell: str) -> None:
    """Print the shell's completion script for xceprov, to load from the shell's startup file.

    \b
    bash (~/.bashrc):                 eval "$(xceprov completion bash)"
    zsh (~/.zshrc, after compinit):   eval "$(xceprov completion zsh)"
    fish:                             xceprov completion fish > ~/.config/fish/completions/xceprov.fish
    """
    root = ctx.find_root()
    cls = get_completion_class(shell)
    if cls is None:  # every word of SHELLS has a class; kept for click versions that drop one
        raise click.UsageError(f"click has no completion for {shell}")
    script = cls(root.command, {}, root.info_name or "xceprov", COMPLETE_VAR).source()
    click.echo(script, nl=not script.endswith("\n"))
