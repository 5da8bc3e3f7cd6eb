"""The simulated cloud's mutation journal under the real executor: a lease from the simulated
controller, real Terraform, the xcesim provider from the local mirror.

What an operator (or the scale-out tests) relies on: every cloud call of an op is journalled
with the epoch of the lease it was made under, creates and deletes alike, and the journal of a
single holder passes the never-interleave check.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mutation_journal import assert_epochs_never_interleave
from reconcile_world import reconcile_world

from orchestrator.model import tags as owner
from orchestrator.ops.drain import DrainSettings

pytestmark = pytest.mark.integration


def test_an_apply_then_a_return_journal_the_lease_epoch(tmp_path: Path) -> None:
    with reconcile_world(tmp_path) as world:
        epoch = world.leases.gate("sim").tag()
        made = world.executor.create("sim", "cpu", 2)
        first, second = sorted(c.key for c in made.created)
        world.executor.return_instances("sim", [first], drain=DrainSettings(drain=False))
        assert world.leases.gate("sim").tag() == epoch, "the lease changed hands during the test"
        journal = assert_epochs_never_interleave(world.store.path)
        alive = world.alive()

    assert sorted((m.action, m.client_token) for m in journal) == [
        ("create", first),
        ("create", second),
        ("delete", first),
    ]
    assert journal[-1].action == "delete" and journal[-1].reason == "user-terminate"
    assert {(m.cluster, m.provider, m.epoch) for m in journal} == {(world.cluster, "sim", epoch)}
    # The create's epoch is the one on the instance's tags; the delete's came from the plan's fence.
    assert list(alive) == [second] and alive[second].tags[owner.EPOCH] == epoch
    assert {m.instance_id for m in journal if m.client_token == second} == {alive[second].id}
