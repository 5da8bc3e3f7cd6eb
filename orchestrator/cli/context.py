"""What every verb gets from the ``xceprov`` group: the configuration asked for and the verbosity.

It lives apart from ``orchestrator.cli.main`` so that the verb modules, which ``main`` imports
to register them, never import ``main`` back.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from orchestrator.configfile import LoadedConfig, load_config


@dataclass
class CliContext:
    """What every verb gets: the configuration path asked for and the verbosity."""

    config_path: str | None
    verbose: int
    _loaded: LoadedConfig | None = None

    def config(self) -> LoadedConfig:
        """The validated configuration, loaded once on first use."""
        if self._loaded is None:
            self._loaded = load_config(self.config_path)
        return self._loaded


pass_ctx = click.make_pass_decorator(CliContext)
