"""A host the controller reports running work, returned through the provider contract.

The simulated controller in its own process, the simulated cloud behind real Terraform, the
contract's one-shot form with its detached workers; the host is joined by the test's own worker
connection and given work (``adminSubmit``). ``requestReturnMachines`` answers that machine
``fail`` with the reason, leaves the instance running and says so in the audit log, as
``xceprov destroy`` refuses it; ``"force": true`` returns it, audited.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_run import xceprov
from sim_controller_helpers import connect, controller_block, controller_process, join_worker, worker_token

from orchestrator.model.instances import instance_key
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.sim.controller import admin

pytestmark = pytest.mark.integration

CLUSTER = "rcbusy"
POLL_LIMIT = 240.0


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[Path, Path, str]]:
    """(the site, the controller's state directory, its address): a controller of its own."""
    # A long heartbeat: the test's worker connection sends none and must stay joined.
    with controller_process(tmp_path, ttl=30.0, heartbeat=600) as (ctl_state, address, _proc):
        where = tmp_path / "site"
        where.mkdir()
        config = {
            "cluster": CLUSTER,
            "state_dir": "state",
            "controller": controller_block(ctl_state, address, "orch"),
            "providers": {"sim": {"module": "xcesim", "max_instances": 4}},
            "templates": {"cpu": {"providers": {"sim": {"flavor": "c8.large", "image": "debian-12"}}}},
        }
        (where / "xceprov.yaml").write_text(json.dumps(config))
        yield where, ctl_state, address


def call(where: Path, action: str, document: object) -> tuple[int, dict[str, Any]]:
    path = where / f"{action}.json"
    path.write_text(json.dumps(document))
    done = xceprov(where, "provider", action, "-f", str(path), "--no-bootstrap")
    lines = done.stdout.splitlines()
    assert len(lines) == 1, (done.stdout, done.stderr)
    return done.returncode, json.loads(lines[0])


def finished(where: Path, request_id: str) -> dict[str, Any]:
    """getRequestStatus until the request is no longer running (bounded)."""
    deadline = time.monotonic() + POLL_LIMIT
    while True:
        code, answer = call(where, "getRequestStatus", {"requests": [{"requestId": request_id}]})
        assert code == 0, answer
        [status] = answer["requests"]
        if status["status"] != "running":
            return dict(status)
        assert time.monotonic() < deadline, f"still running after {POLL_LIMIT:g}s: {status}"
        time.sleep(1.0)


def audit(where: Path, action: str) -> list[dict[str, Any]]:
    entries = [json.loads(line) for line in (where / "state" / "audit.log").read_text().splitlines()]
    return [e for e in entries if e["action"] == action]


def test_a_busy_host_is_answered_fail_and_kept_until_the_caller_says_force(site: tuple[Path, Path, str]) -> None:
    where, ctl_state, address = site
    cloud = CloudStore(where / "state" / "sim" / "cloud.sqlite")
    code, asked = call(where, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 1}})
    assert code == 0, asked
    created = finished(where, asked["requestId"])
    assert created["status"] == "complete", created
    [machine] = created["machines"]
    key = instance_key(asked["requestId"], 0)

    host, port = address.rsplit(":", 1)
    worker = connect((host, int(port)), ctl_state / "tls" / "ca.pem")
    try:
        token = worker_token(ctl_state, key, machine["name"])
        joined = join_worker(worker, machine["name"], machine["machineId"], token=token, instance_key=key)
        assert joined.kind == "joined", joined.body
        admin.submit(ctl_state, "cpu", 1, 600.0)  # work for the host, outlasting the test
        deadline = time.monotonic() + 60
        while not any(h["state"] == "busy" for h in admin.status(ctl_state).get("hosts", [])):
            assert time.monotonic() < deadline, admin.status(ctl_state)
            time.sleep(0.2)

        ref = {"name": machine["name"], "machineId": machine["machineId"]}
        code, refused = call(where, "requestReturnMachines", {"machines": [ref]})
        assert code == 0, refused
        status = finished(where, refused["requestId"])
        assert status["status"] == "complete_with_error", status
        [answer] = status["machines"]
        assert (answer["result"], answer["status"]) == ("fail", "running"), answer
        assert "busy" in answer["message"] and '"force": true' in answer["message"]
        assert [i.id for i in cloud.list_instances({"xce:cluster": CLUSTER})] == [machine["machineId"]]
        assert [(e["op"], e["busy"]) for e in audit(where, "op-return-refused")] == [(refused["requestId"], [key])]

        code, forced = call(where, "requestReturnMachines", {"machines": [ref], "force": True})
        assert code == 0, forced
        assert finished(where, forced["requestId"])["status"] == "complete"
        assert cloud.list_instances({"xce:cluster": CLUSTER}) == []
        assert [(e["op"], e["busy"]) for e in audit(where, "op-return-forced")] == [(forced["requestId"], [key])]
    finally:
        worker.close()
