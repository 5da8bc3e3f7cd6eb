"""``xceprov provider ACTION -f FILE`` end to end, standalone, on the simulated cloud.

A resource connector's round trip through the one-shot form: the templates, a request whose
detached worker applies it (the call itself returns at once), the status polled until complete
with the machines' addresses, a return polled until complete, and nothing left in the cloud.
Hosts are not bootstrapped here (``--no-bootstrap``: the simulated hosts need root); the
harness of the shipped scripts drives the bootstrap and the join on the embedded world.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_run import xceprov

from orchestrator.configfile import ENV_VAR
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.workspace.audit import AUDIT_FILE

pytestmark = pytest.mark.integration

SITE = """
cluster: {cluster}
state_dir: state
standalone: true
controller: {{ca: system}}
providers:
  sim:
    module: xcesim
    max_instances: 5
    settings: {{store: {store}}}
templates:
  cpu:
    xce: {{slots: 4, resources: {{mem: 8G}}}}
    providers:
      sim: {{flavor: c8.large, image: debian-12}}
"""

POLL_LIMIT = 240.0


def site(tmp_path: Path, cluster: str) -> Path:
    where = tmp_path / "site"
    where.mkdir()
    (where / "xceprov.yaml").write_text(SITE.format(cluster=cluster, store=tmp_path / "cloud.sqlite"))
    return where


def call(where: Path, action: str, document: object, *extra: str) -> tuple[int, dict[str, Any]]:
    """One script call: the document in a file, the JSON answer from stdout (one line)."""
    path = where / f"{action}.json"
    path.write_bytes(document if isinstance(document, bytes) else json.dumps(document).encode())
    done = xceprov(where, "provider", action, "-f", str(path), *extra)
    lines = done.stdout.splitlines()
    assert len(lines) == 1, (done.stdout, done.stderr)
    return done.returncode, json.loads(lines[0])


def poll(where: Path, request_id: str) -> dict[str, Any]:
    """getRequestStatus until the request is no longer running (as the resource connector polls)."""
    deadline = time.monotonic() + POLL_LIMIT
    while True:
        code, answer = call(where, "getRequestStatus", {"requests": [{"requestId": request_id}]})
        assert code == 0, answer
        [status] = answer["requests"]
        if status["status"] != "running" or time.monotonic() > deadline:
            return status
        time.sleep(1.0)


def test_a_resource_connector_round_trip_leaves_nothing_in_the_cloud(tmp_path: Path) -> None:
    where = site(tmp_path, "rcround")
    cloud = CloudStore(tmp_path / "cloud.sqlite")

    code, templates = call(where, "getAvailableTemplates", {})
    assert code == 0
    [offered] = templates["templates"]
    assert offered["templateId"] == "cpu.sim" and offered["maxNumber"] == 5
    assert offered["attributes"]["ncpus"] == ["Numeric", "4"] and offered["attributes"]["nram"] == ["Numeric", "8192"]

    code, asked = call(
        where, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 2}}, "--no-bootstrap"
    )
    assert code == 0, asked
    request = asked["requestId"]
    # The same document again (a retry whose answer was lost) is the same request: one op.
    code, again = call(
        where, "requestMachines", {"template": {"templateID": "cpu.sim", "machineCount": 2}}, "--no-bootstrap"
    )
    assert (code, again["requestId"]) == (0, request)

    status = poll(where, request)
    assert status["status"] == "complete", status
    assert len(status["machines"]) == 2
    assert all(m["result"] == "succeed" and m["privateIpAddress"] and m["machineId"] for m in status["machines"])
    live = cloud.list_instances({"xce:cluster": "rcround"})
    assert sorted(i.id for i in live) == sorted(m["machineId"] for m in status["machines"])
    assert {i.tags["xce:op_id"] for i in live} == {request}

    names = [{"name": m["name"], "machineId": m["machineId"]} for m in status["machines"]]
    code, back = call(where, "requestReturnMachines", {"machines": names})
    assert code == 0, back
    returned = poll(where, back["requestId"])
    assert returned["status"] == "complete", returned
    assert {m["status"] for m in returned["machines"]} == {"terminated"}
    assert cloud.list_instances({"xce:cluster": "rcround"}) == []


def test_malformed_documents_through_the_script_change_nothing(tmp_path: Path) -> None:
    where = site(tmp_path, "rcbad")
    for action, document in (
        ("requestMachines", b"\x89PNG\r\n\x1a\n\x00\x00binary"),
        ("requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 10**9}}),
        ("requestMachines", {"template": {"templateId": "gpu.sim", "machineCount": 1}}),
        ("getRequestStatus", {"requests": [{"requestId": "op-6b49d200-0123456789ab"}]}),
        ("requestReturnMachines", {"machines": [{"name": "nobody"}]}),
    ):
        code, answer = call(where, action, document)
        assert code == 1, (action, answer)
        assert set(answer) == {"error"} and answer["error"]["message"]
    assert not (where / "state" / "facts").exists()
    assert CloudStore(tmp_path / "cloud.sqlite").list_instances({"xce:cluster": "rcbad"}) == []


def test_a_daemon_holding_the_provider_refuses_the_script_naming_it(tmp_path: Path) -> None:
    from sim_controller_helpers import controller_block, join_provisioner, lease, running_controller

    with running_controller(tmp_path / "ctl") as ctl:
        daemon = ctl.provisioner("orch")
        joined = join_provisioner(daemon, "rcheld-daemon-m1", ["sim"], lease_instance="rcheld-daemon-m1.41.cd")
        assert joined.kind != "error", joined
        granted = lease(daemon, "leaseAcquire", "sim")
        assert granted.kind != "error", granted
        where = tmp_path / "site"
        where.mkdir()
        block = controller_block(tmp_path / "ctl", f"{ctl.addr[0]}:{ctl.addr[1]}", "orch")
        text = SITE.format(cluster="rcheld", store=tmp_path / "cloud.sqlite").replace("standalone: true\n", "")
        text = text.replace("controller: {ca: system}\n", f"controller: {json.dumps(block)}\n")
        (where / "xceprov.yaml").write_text(text)
        code, answer = call(where, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 1}})
        daemon.close()
    assert code == 9, answer
    assert answer["error"]["type"] == "held"
    assert "rcheld-daemon-m1" in answer["error"]["holder"]
    assert "let the daemon do the work" in answer["error"]["message"]
    assert not (where / "state" / "contract").exists()
    assert CloudStore(tmp_path / "cloud.sqlite").list_instances({"xce:cluster": "rcheld"}) == []


def controlled_site(tmp_path: Path, cluster: str, ctl_dir: Path, address: tuple[str, int]) -> Path:
    """A site whose fence is the simulated controller's lease (not standalone)."""
    from sim_controller_helpers import controller_block

    where = tmp_path / "site"
    where.mkdir()
    block = controller_block(ctl_dir, f"{address[0]}:{address[1]}", "orch")
    text = SITE.format(cluster=cluster, store=tmp_path / "cloud.sqlite").replace("standalone: true\n", "")
    (where / "xceprov.yaml").write_text(
        text.replace("controller: {ca: system}\n", f"controller: {json.dumps(block)}\n")
    )
    return where


def start_call(where: Path, action: str, document: object) -> subprocess.Popen[str]:
    """One script call, running (its answer read with :func:`finish_call`)."""
    path = where / f"{action}.json"
    path.write_text(json.dumps(document))
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "provider", action, "-f", str(path), "--no-bootstrap"],
        cwd=where,
        env={**os.environ, ENV_VAR: str(where / "xceprov.yaml")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_call(proc: subprocess.Popen[str]) -> tuple[int, dict[str, Any]]:
    out, err = proc.communicate(timeout=300)
    lines = out.splitlines()
    assert len(lines) == 1, (out, err)
    return proc.returncode, json.loads(lines[0])


def refusals_of(where: Path, holder: str) -> int:
    """How many ``lease-refused`` entries naming ``holder`` the site's audit log has."""
    path = where / "state" / AUDIT_FILE
    if not path.exists():
        return 0
    entries = [json.loads(line) for line in path.read_text().splitlines()]
    return sum(1 for e in entries if e["action"] == "lease-refused" and holder in e.get("holder", ""))


def grant_epoch(granted: Any) -> tuple[int, int]:
    epoch = granted.body["epoch"]
    return int(epoch["term"]), int(epoch["seq"])


def test_a_script_waits_while_another_of_the_contracts_own_holds_the_provider(tmp_path: Path) -> None:
    """Two scripts at once on one provider are serialised: a call that finds the lease held by
    another of the contract's calls or workers waits for it (here: released while the call waits)
    and then succeeds; any other holder (a command) is refused at once, naming it."""
    from sim_controller_helpers import join_provisioner, lease, running_controller

    with running_controller(tmp_path / "ctl") as ctl:
        where = controlled_site(tmp_path, "rcwait", tmp_path / "ctl", ctl.addr)
        asked = {"template": {"templateId": "cpu.sim", "machineCount": 1}}

        command = ctl.provisioner("orch")
        assert join_provisioner(command, "rcwait-cli-m1", ["sim"], lease_instance="rcwait-cli-m1.7.ab").kind != "error"
        granted = lease(command, "leaseAcquire", "sim")
        assert granted.kind == "leaseGrant", granted
        code, answer = call(where, "requestMachines", asked, "--no-bootstrap")
        assert code == 9, answer
        assert answer["error"]["type"] == "held" and "rcwait-cli-m1" in answer["error"]["holder"], answer
        assert not (where / "state" / "contract").exists()
        assert lease(command, "leaseRelease", "sim", grant_epoch(granted)).kind != "error"
        command.close()

        worker = ctl.provisioner("orch")
        joined = join_provisioner(worker, "rcwait-contract-m2", ["sim"], lease_instance="rcwait-contract-m2.8.cd")
        assert joined.kind != "error", joined
        granted = lease(worker, "leaseAcquire", "sim")
        assert granted.kind == "leaseGrant", granted
        proc = start_call(where, "requestMachines", asked)
        try:
            # The call found the lease held by the contract's own worker, and waits rather than answer.
            deadline = time.monotonic() + 120
            while refusals_of(where, "rcwait-contract-m2") == 0 and proc.poll() is None:
                assert time.monotonic() < deadline, "the call never asked for the lease"
                time.sleep(0.2)
            assert proc.poll() is None, finish_call(proc)
            assert not (where / "state" / "contract").exists()
            assert lease(worker, "leaseRelease", "sim", grant_epoch(granted)).kind != "error"
            code, answer = finish_call(proc)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        worker.close()
    assert code == 0, answer
    assert answer["requestId"].startswith("op-"), answer
    assert (where / "state" / "contract" / "requests" / f"{answer['requestId']}.json").exists()
