"""Worker join tokens for one bootstrap run, handed to Ansible without leaving them at rest.

The controller's join key (``controller.join_key``) mints one token per host
(``orchestrator.protocol.jointoken``), expiring at that host's join deadline (its
``expectedHost`` fact's, which the op hands over); a host the caller knows no deadline of (a
re-run of ``xceprov bootstrap``) gets ``providers.<name>.join_deadline`` from now. A host that
joined already is admitted again with any valid token of its own from the instance it first
joined from, expired or not (docs/protocol.md, "Authentication and roles").

The tokens go into a JSON file (0600, in a fresh 0700 directory under ``<state_dir>/ansible``)
that only the node manager role reads, on the control node, in a ``no_log`` task; the directory
is removed when the run ends. So no inventory, extra vars file, runner artifact or log holds a
token; only the file's path is passed, as an extra var.

A run that cannot remove it (the process is killed, or exits with ``os._exit`` past the daemon's
``stop_timeout``) leaves it behind; the directory's lock (``durable.OwnedDir``) then has no
holder, and the next bootstrap run or daemon start removes it (:func:`remove_stale_tokens`). The
daemon also removes its own before such an exit (:func:`remove_own_tokens`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from orchestrator import durable
from orchestrator.clients.ansible.inventory import InstanceRecord
from orchestrator.errors import ConfigError
from orchestrator.model.config import Config
from orchestrator.model.firstboot import TOKEN_FORM
from orchestrator.model.redaction import register_form
from orchestrator.protocol.jointoken import JoinKeyError, join_token, read_join_key

TOKENS_VAR = "xce_node_manager_join_tokens_file"
PREFIX = "join-tokens-"

# This process's token directories, so that an exit that skips ``finally`` can remove them first.
_own: set[durable.OwnedDir] = set()
_own_lock = threading.Lock()


def tokens_parent(config: Config) -> Path:
    """The directory under which each bootstrap run makes its tokens directory."""
    return config.state_dir / "ansible"


def remove_stale_tokens(config: Config) -> list[Path]:
    """Remove the tokens directories of runs whose process is gone (killed, or ``os._exit``)."""
    return durable.remove_stale(tokens_parent(config), PREFIX)


def remove_own_tokens() -> None:
    """Remove this process's tokens directories now (it is about to exit without its ``finally``)."""
    with _own_lock:
        owned = list(_own)
        _own.clear()
    for directory in owned:
        directory.close()


@contextlib.contextmanager
def join_token_vars(
    config: Config, records: Sequence[InstanceRecord], deadlines: Mapping[str, float] | None = None
) -> Iterator[dict[str, str]]:
    """Extra vars naming this run's tokens file (none without ``controller.join_key``).

    ``deadlines``: instance key -> its join deadline (unix seconds), each token's expiry."""
    key_path = config.controller.join_key
    if key_path is None:
        yield {}
        return
    try:
        key = read_join_key(key_path)
    except JoinKeyError as exc:
        raise ConfigError([f"controller.join_key: {exc}"]) from None
    register_form(TOKEN_FORM)  # no sink of this process shows a token, whatever quotes it
    base = durable.private_dir(tokens_parent(config))
    remove_stale_tokens(config)
    secret_dir = durable.OwnedDir(base, PREFIX)  # 0700, locked while this process runs
    with _own_lock:
        _own.add(secret_dir)
    try:
        path = secret_dir.path / "tokens.json"
        tokens = {r.name: join_token(key, r.key, r.name, token_expiry(config, r, deadlines or {})) for r in records}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(tokens, f)
        yield {TOKENS_VAR: str(path)}
    finally:
        with _own_lock:
            _own.discard(secret_dir)
        secret_dir.close()


def token_expiry(config: Config, record: InstanceRecord, deadlines: Mapping[str, float]) -> int:
    """The expiry of ``record``'s token: its join deadline (rounded up to a whole second), else
    its provider's ``join_deadline`` from now."""
    deadline = deadlines.get(record.key)
    if not deadline:
        provider = config.providers.get(record.provider)
        deadline = time.time() + (float(provider.join_deadline) if provider is not None else 900.0)
    return math.ceil(deadline)
