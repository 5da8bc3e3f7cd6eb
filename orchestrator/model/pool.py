"""The warm pool as values: how a pool instance is marked, and how its ops read in the facts.

A warm-pool instance is launched by a create op like any other, with two differences in its
desired entry (:func:`pooled`): ``power_state`` ``stopped`` (the cloud launches it and keeps it
stopped) and the tag ``xce:pool=warm``. The op's ``requestIntent`` says it fills a pool
(``detail`` :data:`FILL_DETAIL`), so the ledger does not count its keys as hosts on their way.

Demand takes pool instances with a *start* op: its ``requestIntent`` (``count`` 0, so no reader
takes it for a create of new keys) names the keys it starts in ``detail``
(:func:`start_detail`), committed before any change; the desired entries become
:func:`started` (``power_state`` ``running``, no pool tag), the apply starts them in place, and
each started key gets an ``expectedHost`` fact of the start op with a fresh join deadline. No
new fact kind: the controller's schema is unchanged (docs/daemon.md, "The warm pool").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from orchestrator.model import tags as owner
from orchestrator.model.instances import InstanceSpec

WARM: Final = "warm"
# ``detail`` of the ``requestIntent`` of an op that fills a pool.
FILL_DETAIL: Final = "warm-pool fill"
# ``detail`` of a start op's ``requestIntent``: this prefix, then a JSON list of the keys.
_START_PREFIX: Final = "warm-pool start "
# The most keys one start op names: its detail stays far below the controller's 4096 bytes
# (an instance key is at most 64 characters, 66 with its quotes and comma).
MAX_START_KEYS: Final = 50


def pooled(spec: InstanceSpec) -> InstanceSpec:
    """``spec`` as a pool instance: launched stopped, tagged ``xce:pool=warm``."""
    return spec.model_copy(update={"power_state": "stopped", "tags": {**spec.tags, owner.POOL: WARM}})


def started(spec: InstanceSpec) -> InstanceSpec:
    """``spec`` taken from the pool: running, the pool tag removed (every other tag kept)."""
    tags = {k: v for k, v in spec.tags.items() if k != owner.POOL}
    return spec.model_copy(update={"power_state": "running", "tags": tags})


def in_pool(tags: object) -> bool:
    """Whether an instance's tags (a state's or a listing's) mark it as waiting in a pool."""
    return isinstance(tags, dict) and tags.get(owner.POOL) == WARM


def start_detail(keys: Sequence[str]) -> str:
    """The ``detail`` of a start op's intent naming ``keys`` (at most :data:`MAX_START_KEYS`)."""
    if not keys or len(keys) > MAX_START_KEYS:
        raise ValueError(f"a start op names 1 to {MAX_START_KEYS} keys, not {len(keys)}")
    return _START_PREFIX + json.dumps(sorted(keys), separators=(",", ":"))


def start_keys(detail: str) -> list[str] | None:
    """The keys a start op's intent names; None when ``detail`` is not a start op's."""
    if not detail.startswith(_START_PREFIX):
        return None
    try:
        keys = json.loads(detail[len(_START_PREFIX) :])
    except ValueError:
        return None
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        return None
    return list(keys)
