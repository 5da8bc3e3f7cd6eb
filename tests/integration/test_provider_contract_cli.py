"""``xceprov provider ACTION -f FILE`` end to end, standalone, on the simulated cloud.

A resource connector's round trip through the one-shot form: the templates, a request whose
detached worker applies it (the call itself returns at once), the status polled until complete
with the machines' addresses, a return polled until complete, and nothing left in the cloud.
Hosts are not bootstrapped here (``--no-bootstrap``: the simulated hosts need root); the
harness of the shipped scripts drives the bootstrap and the join on the embedded world.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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
# The test's own lease holders do not renew: a TTL no loaded machine outlasts (they release).
LEASE_TTL = 3600.0


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

    asked_doc = {"template": {"templateId": "cpu.sim", "machineCount": 2}, "clientToken": "rc-1"}
    code, asked = call(where, "requestMachines", asked_doc, "--no-bootstrap")
    assert code == 0, asked
    request = asked["requestId"]
    # The same token again (a retry whose answer was lost) is the same request: one op.
    code, again = call(
        where,
        "requestMachines",
        {"template": {"templateID": "cpu.sim", "machineCount": 2}, "clientToken": "rc-1"},
        "--no-bootstrap",
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
        ("requestReturnMachines", {"machines": [{"name": "nobody"}]}),
    ):
        code, answer = call(where, action, document)
        assert code == 1, (action, answer)
        assert set(answer) == {"error", "message"} and answer["message"] == answer["error"]["message"] != ""
    assert not (where / "state" / "facts").exists()
    assert CloudStore(tmp_path / "cloud.sqlite").list_instances({"xce:cluster": "rcbad"}) == []


def test_a_daemon_holding_the_provider_refuses_the_script_naming_it(tmp_path: Path) -> None:
    from sim_controller_helpers import join_provisioner, lease, running_controller

    with running_controller(tmp_path / "ctl", ttl=LEASE_TTL) as ctl:
        daemon = ctl.provisioner("orch")
        joined = join_provisioner(daemon, "rcheld-daemon-m1", ["sim"], lease_instance="rcheld-daemon-m1.41.cd")
        assert joined.kind != "error", joined
        granted = lease(daemon, "leaseAcquire", "sim")
        assert granted.kind != "error", granted
        where = controlled_site(tmp_path, "rcheld", tmp_path / "ctl", ctl.addr)
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


@contextlib.contextmanager
def holding(ctl: Any, label: str) -> Iterator[Callable[[], None]]:
    """A provisioner joined as ``label`` holding provider sim's lease; yields its release."""
    from sim_controller_helpers import join_provisioner, lease

    client = ctl.provisioner("orch")
    try:
        joined = join_provisioner(client, label, ["sim"], lease_instance=f"{label}.8.cd")
        assert joined.kind != "error", joined
        granted = lease(client, "leaseAcquire", "sim")
        assert granted.kind == "leaseGrant", granted
        epoch = granted.body["epoch"]

        def release() -> None:
            assert lease(client, "leaseRelease", "sim", (int(epoch["term"]), int(epoch["seq"]))).kind != "error"

        yield release
    finally:
        client.close()


def wait_while_refused(where: Path, proc: subprocess.Popen[Any], holder: str) -> None:
    """Until the running call has found the lease held by ``holder`` (its audit entry); it must
    still be running then (waiting, not refused)."""
    deadline = time.monotonic() + 120
    while refusals_of(where, holder) == 0 and proc.poll() is None:
        assert time.monotonic() < deadline, "the call never asked for the lease"
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()


def test_a_script_waits_while_another_of_the_contracts_own_holds_the_provider(tmp_path: Path) -> None:
    """Two scripts at once on one provider are serialised: a call that finds the lease held by
    another of the contract's calls or workers waits for it (here: released while the call waits)
    and then succeeds; any other holder (a command) is refused at once, naming it."""
    from sim_controller_helpers import running_controller

    with running_controller(tmp_path / "ctl", ttl=LEASE_TTL) as ctl:
        where = controlled_site(tmp_path, "rcwait", tmp_path / "ctl", ctl.addr)
        asked = {"template": {"templateId": "cpu.sim", "machineCount": 1}}

        with holding(ctl, "rcwait-cli-m1") as release:
            code, answer = call(where, "requestMachines", asked, "--no-bootstrap")
            assert code == 9, answer
            assert answer["error"]["type"] == "held" and "rcwait-cli-m1" in answer["error"]["holder"], answer
            assert not (where / "state" / "contract").exists()
            release()

        with holding(ctl, "rcwait-contract-m2") as release:
            proc = start_call(where, "requestMachines", asked)
            try:
                wait_while_refused(where, proc, "rcwait-contract-m2")
                assert not (where / "state" / "contract").exists()
                release()
                code, answer = finish_call(proc)
            finally:
                ended(proc)
        assert code == 0, answer
        # Its worker (detached) applies it once the call released the lease.
        assert poll(where, answer["requestId"])["status"] == "complete"


def ended(proc: subprocess.Popen[Any]) -> None:
    """``proc`` ended (killed when a failed assertion left it running)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def serving(where: Path, *options: str) -> subprocess.Popen[bytes]:
    """``xceprov provider serve`` running in ``where``."""
    return subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "provider", "serve", "--no-bootstrap", *options],
        cwd=where,
        env={**os.environ, ENV_VAR: str(where / "xceprov.yaml")},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def sigterm_in_flight(
    where: Path, holder: str, release: Callable[[], None] | None, *options: str
) -> tuple[int, list[dict[str, Any]], str]:
    """A requestMachines line sent to ``serve``, SIGTERM while it waits for ``holder``'s lease
    (then ``release``, when given); the exit code, the answers and stderr."""
    proc = serving(where, *options)
    try:
        assert proc.stdin is not None
        line = {
            "id": 7,
            "action": "requestMachines",
            "input": {"template": {"templateId": "cpu.sim", "machineCount": 1}},
        }
        proc.stdin.write(json.dumps(line).encode() + b"\n")
        proc.stdin.flush()
        wait_while_refused(where, proc, holder)
        proc.send_signal(signal.SIGTERM)
        if release is not None:
            release()
        out, err = proc.communicate(timeout=300)
    finally:
        ended(proc)
    return proc.returncode, [json.loads(x) for x in out.decode().splitlines()], err.decode(errors="replace")


def test_sigterm_of_serve_lets_the_request_in_flight_finish_and_answer(tmp_path: Path) -> None:
    """SIGTERM with a request in flight: no more input is read, the request ends within the stop
    timeout and its answer is written, then the process exits 0; the request is whole (its op
    placed, recorded, and carried out by its worker)."""
    from sim_controller_helpers import running_controller

    with running_controller(tmp_path / "ctl", ttl=LEASE_TTL) as ctl:
        where = controlled_site(tmp_path, "rcterm", tmp_path / "ctl", ctl.addr)
        with holding(ctl, "rcterm-contract-m2") as release:
            code, answers, err = sigterm_in_flight(where, "rcterm-contract-m2", release)
        assert code == 0, err
        [answer] = answers
        assert answer["id"] == 7 and answer["result"]["requestId"].startswith("op-"), answer
        assert poll(where, answer["result"]["requestId"])["status"] == "complete"


def test_sigterm_of_serve_past_its_stop_timeout_answers_the_request_abandoned_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """SIGTERM with a request still waiting at the stop timeout: the request is answered as a JSON
    error saying it was abandoned, one line on stderr names it, exit 1, and nothing was placed."""
    from sim_controller_helpers import running_controller

    with running_controller(tmp_path / "ctl", ttl=LEASE_TTL) as ctl:
        where = controlled_site(tmp_path, "rcstop", tmp_path / "ctl", ctl.addr)
        with holding(ctl, "rcstop-contract-m2"):
            code, answers, err = sigterm_in_flight(where, "rcstop-contract-m2", None, "--stop-timeout", "1s")
    assert code == 1, err
    [answer] = answers
    assert answer["id"] == 7 and answer["error"]["type"] == "failed", answer
    assert "abandoned" in answer["error"]["message"]
    assert [line for line in err.splitlines() if "abandoned" in line and "7" in line], err
    assert "Traceback" not in err
    assert not (where / "state" / "contract").exists()
    audit = (where / "state" / AUDIT_FILE).read_text()
    assert "op-placed" not in audit and "op-desired" not in audit
