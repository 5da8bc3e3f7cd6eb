"""The PostgreSQL connection string of ``terraform.backend: pg`` (never in the configuration text).

From the environment variable ``PG_CONN_STR`` (Terraform's own), else from the file
``terraform.pg_conn_file`` names (read at start, stripped). Neither: one configuration error
naming ``terraform.backend``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from orchestrator.errors import ConfigError
from orchestrator.model.config import Config

ENV: str = "PG_CONN_STR"


def pg_conn_str(config: Config, environ: Mapping[str, str] = os.environ) -> str | None:
    """The connection string with the pg backend; None with the local one."""
    if config.terraform.backend != "pg":
        return None
    value = environ.get(ENV, "").strip()
    if value:
        return value
    if config.terraform.pg_conn_file:
        try:
            value = Path(config.terraform.pg_conn_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError([f"terraform.pg_conn_file: {config.terraform.pg_conn_file}: {exc.strerror}"]) from None
        if value:
            return value
    raise ConfigError([f"terraform.backend: pg needs the connection string in {ENV} or terraform.pg_conn_file"])
