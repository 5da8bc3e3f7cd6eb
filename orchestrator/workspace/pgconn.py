"""The PostgreSQL connection string of ``terraform.backend: pg``: where it comes from, and keeping it secret.

The string holds the database password, so it is never part of the configuration text. It is
Terraform's own ``PG_CONN_STR`` from the environment, else the one line of the file
``terraform.pg_conn_file`` names (``credential:NAME`` is resolved to a file of
``$CREDENTIALS_DIRECTORY`` when the configuration is loaded, like the other credential keys).
It reaches Terraform only as ``PG_CONN_STR`` in the environment of its process: never on a
command line (process listings), never in a file of the working directory, a plan or a log.

Every problem is one line naming the key or the file and what is wrong, never the string.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final

from orchestrator.clients.postgres.redact import redact as postgres_redact
from orchestrator.clients.postgres.redact import secrets_of as secrets_of
from orchestrator.errors import ConfigError
from orchestrator.model.config import Config
from orchestrator.model.redaction import register

PG_CONN_ENV: Final = "PG_CONN_STR"


def pg_conn_str(config: Config, environ: Mapping[str, str] = os.environ) -> str | None:
    """The connection string with ``backend: pg`` (None with ``local``); ConfigError when there is none."""
    settings = config.terraform
    if settings.backend != "pg":
        return None
    from_env = environ.get(PG_CONN_ENV, "")
    if from_env.strip():
        return _one_line(from_env, f"${PG_CONN_ENV}")
    if settings.pg_conn_file is None:
        raise ConfigError(
            [
                f"terraform.backend: pg needs the PostgreSQL connection string in ${PG_CONN_ENV} "
                "or in the file terraform.pg_conn_file names; neither is set"
            ]
        )
    path = settings.pg_conn_file
    where = f"terraform.pg_conn_file: {path}"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{where}: no such file"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{where}: a directory, not a file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
        raise ConfigError([f"{where}: cannot be read ({reason})"]) from None
    return _one_line(text, where)


def _one_line(text: str, where: str) -> str:
    """``text`` stripped; ConfigError when it is empty or more than one line (never showing it).

    The string and its password are registered as this process's secrets: every sink (audit,
    status document, log line, the command line's error) hides them in whatever form a message
    carries them (``model/redaction.py``)."""
    value = text.strip()
    if not value:
        raise ConfigError([f"{where}: empty (it must hold the PostgreSQL connection string)"])
    if "\n" in value or "\r" in value:
        raise ConfigError([f"{where}: more than one line (it must hold the connection string alone, on one line)"])
    register(secrets_of(value))
    return value


def redact(text: str, conn_str: str | None) -> str:
    """``text`` with the connection string and its password hidden (the shared store's rule)."""
    return postgres_redact(text, conn_str) if conn_str else text
