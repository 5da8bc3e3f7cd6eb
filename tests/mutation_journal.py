"""Proof that orchestrators never mutated one provider at once: the simulated cloud's journal.

The simulated cloud records every create, terminate, tag update, stop and start with the epoch
of the Terraform run that made it (``CloudStore.mutations``). Two holders that each stay inside
their lease leave, per provider, a journal whose epochs only move forward: once a newer epoch
has mutated a provider, an older one never mutates it again. Entries without an epoch (the
cloud's own expiry and spot reclaims, the ``xceprov sim`` tooling: ``""``) and standalone runs
(``none``: no controller, no order) are no holder's and are left out of the comparison.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from orchestrator.sim.cloud.store import CloudStore, Mutation

_EPOCH = re.compile(r"([0-9]+)\.([0-9]+)")


def epoch_order(tag: str) -> tuple[int, int] | None:
    """``(term, seq)`` of an epoch tag ``<term>.<seq>``; None for ``""`` and ``none``."""
    match = _EPOCH.fullmatch(tag)
    return None if match is None else (int(match.group(1)), int(match.group(2)))


def interleavings(mutations: Iterable[Mutation]) -> list[str]:
    """One line per mutation made under an epoch older than one that already mutated its provider."""
    newest: dict[tuple[str, str], tuple[tuple[int, int], Mutation]] = {}
    found: list[str] = []
    for m in sorted(mutations, key=lambda m: m.seq):
        order = epoch_order(m.epoch)
        if order is None:
            continue
        where = (m.cluster, m.provider)
        seen = newest.get(where)
        if seen is not None and order < seen[0]:
            before, what = seen[1], m.client_token or m.instance_id
            found.append(
                f"provider {m.provider!r} (cluster {m.cluster!r}): #{m.seq} {m.action} {what} under epoch "
                f"{m.epoch} after #{before.seq} {before.action} under the newer epoch {before.epoch}"
            )
        elif seen is None or order > seen[0]:
            newest[where] = (order, m)
    return found


def assert_epochs_never_interleave(store_path: Path) -> list[Mutation]:
    """Fail naming every offending mutation when, per provider, an older epoch mutated after a
    newer one; the journal otherwise (for further checks by the caller)."""
    journal = CloudStore(store_path).mutations()
    found = interleavings(journal)
    assert not found, "epochs interleave in the cloud's mutation journal:\n" + "\n".join(found)
    return journal
