"""Private scratch directories of ops, under the state directory, removed when their process is gone.

An op's saved plan and the variables it was made from hold settings, tags and user data. They
live only while the op runs, in ``<state_dir>/scratch/op-XXXXXXXX/`` (0700, files 0600): private
like the rest of the state directory even when a ``kill -9`` or a crash skips the removal, and
such a leftover is removed at the next op of any process, as join tokens are
(``durable.OwnedDir``: a directory whose lock nobody holds belongs to a process that is gone).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from orchestrator import durable
from orchestrator.model.config import Config

SCRATCH_DIR: Final = "scratch"
OP_PREFIX: Final = "op-"


def remove_stale_scratch(config: Config) -> list[Path]:
    """Remove the op scratch directories of processes that are gone."""
    return durable.remove_stale(config.state_dir / SCRATCH_DIR, OP_PREFIX)


@contextlib.contextmanager
def op_scratch(config: Config) -> Iterator[Path]:
    """A fresh private directory for one op's plan, removed when the block ends (however it ends)."""
    parent = durable.private_tree(config.state_dir, SCRATCH_DIR)
    remove_stale_scratch(config)
    owned = durable.OwnedDir(parent, OP_PREFIX)
    try:
        yield owned.path.absolute()  # Terraform runs in the working directory, not in ours
    finally:
        owned.close()
