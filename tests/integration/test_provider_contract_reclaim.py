"""A spot reclaim under the provider contract, end to end: ``xceprov provider ACTION -f FILE``,
standalone, real Terraform on the simulated cloud, the workers detached as a scheduler starts them.

What the scheduler sees: the reclaimed machine in ``getReturnRequests`` under ``machine`` with
gracePeriod 0; a return of the healthy machine beside it, and a return of the reclaimed one,
each polled to ``complete`` with no other request sent; the reclaimed instance never re-created
and nothing left running in the cloud.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.sim.cloud.store import CloudStore
from tests.integration.test_provider_contract_cli import call, poll, site

pytestmark = pytest.mark.integration


def test_returns_beside_a_spot_reclaim_complete_by_themselves_and_the_reclaimed_one_is_never_re_created(
    tmp_path: Path,
) -> None:
    where = site(tmp_path, "rcreclaim")
    cloud = CloudStore(tmp_path / "cloud.sqlite")
    code, asked = call(
        where, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 2}}, "--no-bootstrap"
    )
    assert code == 0, asked
    status = poll(where, asked["requestId"])
    assert status["status"] == "complete", status
    reclaimed, healthy = sorted(status["machines"], key=lambda m: m["name"])
    [taken] = cloud.spot_reclaim(instance_id=reclaimed["machineId"])
    assert taken.id == reclaimed["machineId"]

    held = {"machines": [{"name": m["name"], "machineId": m["machineId"]} for m in (reclaimed, healthy)]}
    code, back = call(where, "getReturnRequests", held)
    assert code == 0, back
    assert back["requests"] == [
        {"machine": reclaimed["name"], "machineId": reclaimed["machineId"], "gracePeriod": 0, "reason": "spot-reclaim"}
    ], back

    # The scheduler returns the healthy machine: its worker records the reclaim and completes.
    code, returning = call(where, "requestReturnMachines", {"machines": [held["machines"][1]]})
    assert code == 0, returning
    done = poll(where, returning["requestId"])
    assert done["status"] == "complete", (done, worker_log(where, returning["requestId"]))
    # Then the reclaimed one: accepted and complete, nothing re-created.
    code, returning = call(where, "requestReturnMachines", {"machines": [held["machines"][0]]})
    assert code == 0, returning
    done = poll(where, returning["requestId"])
    assert done["status"] == "complete", (done, worker_log(where, returning["requestId"]))
    assert cloud.list_instances({"xce:cluster": "rcreclaim"}) == []
    made = cloud.list_instances({"xce:cluster": "rcreclaim"}, include_terminated=True)
    assert sorted(i.id for i in made) == sorted(m["machineId"] for m in (reclaimed, healthy))
    lost = [json.loads(line) for line in (where / "state" / "facts" / "rcreclaim.jsonl").read_text().splitlines()]
    assert [f["instance_id"] for f in lost if f["kind"] == "lost"] == [reclaimed["machineId"]]


def worker_log(where: Path, request_id: str) -> str:
    path = where / "state" / "contract" / "workers" / f"{request_id}.log"
    return path.read_text(errors="replace")[-2000:] if path.exists() else "(no worker log)"
