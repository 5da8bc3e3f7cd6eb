"""Worker join tokens for one bootstrap run, handed to Ansible without leaving them at rest.

The controller's join key (``controller.join_key``) mints one token per host
(``orchestrator.protocol.jointoken``). The tokens go into a JSON file (0600, in a fresh 0700
directory under ``<state_dir>/ansible``) that only the node manager role reads, on the control
node, in a ``no_log`` task; the directory is removed when the run ends. So no inventory, extra
vars file, runner artifact or log holds a token; only the file's path is passed, as an extra var.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from orchestrator import durable
from orchestrator.clients.ansible.inventory import InstanceRecord
from orchestrator.errors import ConfigError
from orchestrator.model.config import Config
from orchestrator.protocol.jointoken import JoinKeyError, join_token, read_join_key

TOKENS_VAR = "xce_node_manager_join_tokens_file"


@contextlib.contextmanager
def join_token_vars(config: Config, records: Sequence[InstanceRecord]) -> Iterator[dict[str, str]]:
    """Extra vars naming this run's tokens file (none without ``controller.join_key``)."""
    key_path = config.controller.join_key
    if key_path is None:
        yield {}
        return
    try:
        key = read_join_key(key_path)
    except JoinKeyError as exc:
        raise ConfigError([f"controller.join_key: {exc}"]) from None
    base = durable.private_dir(config.state_dir / "ansible")
    secret_dir = Path(tempfile.mkdtemp(prefix="join-tokens-", dir=base))  # 0700
    try:
        path = secret_dir / "tokens.json"
        tokens = {r.name: join_token(key, r.key, r.name) for r in records}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(tokens, f)
        yield {TOKENS_VAR: str(path)}
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)
