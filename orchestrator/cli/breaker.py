"""``xceprov breaker reset TEMPLATE``: close a template's circuit breaker (docs/daemon.md)."""

from __future__ import annotations

import click

from orchestrator.cli.context import CliContext, pass_ctx


@click.group("breaker")
def breaker() -> None:
    """The circuit breakers of templates (open after repeated bootstrap or join failures)."""


@breaker.command("reset")
@click.argument("template")
@pass_ctx
def reset(ctx: CliContext, template: str) -> None:
    """Close TEMPLATE's breaker: hosts of it are requested again from the daemon's next pass."""
    import time

    from orchestrator.reconcile.breaker import Position
    from orchestrator.services.breaker import reset_breaker

    loaded = ctx.config()
    before = reset_breaker(loaded, template)
    position = before.position_at(time.time(), loaded.config.policy.breaker)
    if position == Position.CLOSED and not before.failures:
        click.echo(f"breaker of {template}: already closed, no failures recorded")
        return
    why = f": {before.reason}" if before.reason else ""
    click.echo(f"breaker of {template}: reset (was {position.value}, {len(before.failures)} failures{why})")
