"""Ghost candidates (class (c)): the host-loss rules applied to the scan's own reads.

The scan feeds every shard's drift (and the provider's listing, for the cloud's reasons) to the
same persisted :class:`~orchestrator.ops.hostloss.LossTracker` the executor uses before each
apply (the shard's ``lost-suspects.json``, or its row of the shared store), so both count the
same observations: lost at once when the cloud says it ended the instance (``spot-reclaim``,
``expired``), else after two consecutive reads that find it missing. A key missing for the first
time is read again at once (a second refresh-only plan of that shard only), as the executor's
observer does.

A scan that does not act (``xceprov orphans``, dry run) counts on a scratch copy of the
suspects file: it changes nothing, not even the count.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from orchestrator.ops.executor import Wired
from orchestrator.ops.hostloss import LossTracker, LostInstance
from orchestrator.ops.losses import SUSPECTS_FILE
from orchestrator.orphans.inputs import ProviderRead, ShardRead, read_shard
from orchestrator.workspace.cloudview import Listing
from orchestrator.workspace.workdir import ProviderWorkdir


@contextlib.contextmanager
def tracker_for(shard: ShardRead, persist: bool) -> Iterator[LossTracker]:
    """The shard's tracker, or one over a scratch copy of its suspects (``persist`` False)."""
    real = shard.workdir.suspects
    if persist:
        yield LossTracker(real)
        return
    with tempfile.TemporaryDirectory(prefix="xceprov-orphans-") as tmp:
        scratch = Path(tmp) / SUSPECTS_FILE
        content = real.read()
        if content is not None:
            scratch.write_bytes(content)
        yield LossTracker(scratch)


Reader = Callable[[Wired, ProviderWorkdir], ShardRead]


def lost_instances(
    ops: Wired, cloud: ProviderRead, persist: bool, reader: Reader = read_shard
) -> list[tuple[int, LostInstance]]:
    """(shard index, lost instance) for every shard whose drift shows deleted instances."""
    listing = cloud.listing if cloud.listing is not None and cloud.listing.supported else None
    out: list[tuple[int, LostInstance]] = []
    for shard in cloud.shards:
        if shard.drift is None or not shard.drift.deleted:
            continue
        out += [(shard.index, item) for item in _observe(ops, shard, listing, persist, reader)]
    return out


def _observe(
    ops: Wired, shard: ShardRead, listing: Listing | None, persist: bool, reader: Reader
) -> list[LostInstance]:
    assert shard.drift is not None
    with tracker_for(shard, persist) as tracker:
        with shard.workdir.lock():
            lost = tracker.observe(shard.drift, listing)
        pending = set(shard.drift.deleted) - {item.instance_key for item in lost}
        if not pending:
            return lost
        again = reader(ops, shard.workdir)
        if again.drift is None:
            return lost  # the second read failed: one read alone never declares a loss
        if again.listing is not None and again.listing.supported:
            listing = again.listing
        seen = {item.instance_key for item in lost}
        with shard.workdir.lock():
            return lost + [item for item in tracker.observe(again.drift, listing) if item.instance_key not in seen]
