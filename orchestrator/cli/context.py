"""What every verb gets from the ``xceprov`` group: the configuration asked for and the verbosity.

It lives apart from ``orchestrator.cli.main`` so that the verb modules, which ``main`` imports
to register them, never import ``main`` back.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from orchestrator import durable
from orchestrator.configfile import LoadedConfig, load_config


@dataclass
class CliContext:
    """What every verb gets: the configuration path asked for and the verbosity."""

    config_path: str | None
    verbose: int
    _loaded: LoadedConfig | None = None

    def config(self) -> LoadedConfig:
        """The validated configuration, loaded once on first use.

        A ``state_dir`` that exists and that this user cannot enter (root's, for a user who is
        not root) stops every verb here with one line naming it (exit 1), before any verb
        reaches a file below it.
        """
        if self._loaded is None:
            loaded = load_config(self.config_path)
            durable.refuse_unenterable(loaded.config.state_dir)
            self._loaded = loaded
        return self._loaded


pass_ctx = click.make_pass_decorator(CliContext)
