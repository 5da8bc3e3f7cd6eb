"""The shipped provider scripts driven the way LSF's resource connector drives them, on the embedded world.

The world is the product's own with real simulated hosts (root, pycapnp for the node manager):
controller, cloud behind real Terraform, hosts over SSH in the test's lab. The provider folder
``contrib/provider-contract/`` is laid out as LSF lays it out (scripts under the version's
``resource_connector/xceprov/scripts``, ``xceprov.yaml`` under the configuration's
``resource_connector/xceprov/conf``, found through ``PRO_CONF_DIR`` as LSF sets it), and each
call is ``ACTION.sh -f FILE`` with the document in a file, stdout read as JSON, the exit code
checked: exactly what a management host does. What is asserted is what the scheduler and an
operator see: the answers, the hosts at the controller, the instances in the cloud, the facts.
Every poll is bounded by a deadline and fails naming the last answer it saw.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim_world_helpers import SimWorld, agree, can_run_hosts, wait_until, world_with_hosts

from orchestrator.model.facts import FactKind
from orchestrator.sim.controller import admin
from tests.integration.test_daemon import STOP_TIMEOUT, running_daemon

pytestmark = [pytest.mark.integration, pytest.mark.root]

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "contrib" / "provider-contract"
TEMPLATE = "cpu.sim"  # the templateId of template cpu on provider sim (<template>.<provider>)
CREATE_DEADLINE = 600.0  # seconds a create may take to be applied, bootstrapped and joined
RETURN_DEADLINE = 300.0
POLL_EVERY = 2.0
HELD = 9  # exit code of a call refused because another holder fences the provider
# A mutation finds the fence held while another request's worker applies and bootstraps: the
# connector calls again (LSF asks again at its next cycle), for at most this long.
HELD_DEADLINE = CREATE_DEADLINE


def held(answer: dict[str, Any]) -> str:
    """The holder a ``held`` refusal names (it must name one)."""
    error = answer.get("error", {})
    assert error.get("type") == "held" and error.get("holder"), f"exit 9 with no held error naming a holder: {answer}"
    return str(error["holder"])


class ResourceConnector:
    """The management host's side: the provider folder where LSF keeps it, the scripts called as LSF calls them."""

    def __init__(self, world: SimWorld, top: Path) -> None:
        self.world = world
        self.scripts = top / "10.1" / "resource_connector" / "xceprov" / "scripts"
        shutil.copytree(FOLDER / "scripts", self.scripts)
        self.conf_path = top / "conf" / "resource_connector" / "xceprov"
        (self.conf_path / "conf").mkdir(parents=True)
        shutil.copy(world.site / "xceprov.yaml", self.conf_path / "conf" / "xceprov.yaml")
        self.work = top / "work"
        self.work.mkdir()
        self._calls = 0
        self.refusals: list[str] = []  # the holders named by `held` refusals, in order
        executable = Path(sys.executable).parent / "xceprov"
        assert executable.exists(), f"no xceprov console script beside {sys.executable}"
        # What LSF gives a provider script (and nothing of the test's own configuration).
        environment = {k: v for k, v in os.environ.items() if k != "XCEPROV_CONFIG"}
        self.env = {**environment, "XCEPROV": str(executable), "PRO_CONF_DIR": str(self.conf_path)}

    def start(self, action: str, document: dict[str, Any] | bytes) -> subprocess.Popen[str]:
        """``ACTION.sh -f FILE`` with ``document`` in a fresh file, running."""
        self._calls += 1
        path = self.work / f"{action}-{self._calls}.json"
        path.write_bytes(document if isinstance(document, bytes) else json.dumps(document).encode())
        return subprocess.Popen(
            [str(self.scripts / f"{action}.sh"), "-f", str(path)],
            cwd=self.work,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    @staticmethod
    def result(proc: subprocess.Popen[str], action: str) -> tuple[int, dict[str, Any]]:
        """The exit code and the JSON document on stdout (which must be one)."""
        out, err = proc.communicate(timeout=300)
        try:
            document = json.loads(out)
        except ValueError:
            raise AssertionError(f"{action}: stdout is no JSON document: {out!r}\nstderr: {err}") from None
        assert isinstance(document, dict), f"{action}: {out!r}"
        return proc.returncode, document

    def call(self, action: str, document: dict[str, Any] | bytes) -> tuple[int, dict[str, Any]]:
        return self.result(self.start(action, document), action)

    def ok(self, action: str, document: dict[str, Any]) -> dict[str, Any]:
        """The answer of a call that must succeed; a ``held`` refusal is called again, as a connector does."""
        code, answer = self.call(action, document)
        until = time.monotonic() + HELD_DEADLINE
        while code == HELD and time.monotonic() < until:
            self.refusals.append(held(answer))
            time.sleep(POLL_EVERY)
            code, answer = self.call(action, document)
        assert code == 0, f"{action} {document}: exit {code}: {answer}"
        return answer

    def status(self, request_id: str) -> dict[str, Any]:
        [request] = self.ok("getRequestStatus", {"requests": [{"requestId": request_id}]})["requests"]
        assert request["requestId"] == request_id
        return request

    def worker_log(self, request_id: str) -> str:
        """The end of the request's worker log (for a failure's message)."""
        path = self.world.state / "contract" / "workers" / f"{request_id}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else f"(no worker log {path.name})"

    def complete(self, request_id: str, deadline: float) -> dict[str, Any]:
        """The request polled to its end, which must be ``complete`` (else its worker's log is shown)."""
        request = self.poll(request_id, deadline)
        assert request["status"] == "complete", f"{request}\n--- worker log ---\n{self.worker_log(request_id)}"
        return request

    def poll(self, request_id: str, deadline: float) -> dict[str, Any]:
        """getRequestStatus until the request is no longer ``running`` (bounded)."""
        until = time.monotonic() + deadline
        while True:
            request = self.status(request_id)
            if request["status"] != "running":
                return request
            if time.monotonic() > until:
                raise AssertionError(f"request {request_id} still running after {deadline:g}s; last answer: {request}")
            time.sleep(POLL_EVERY)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    if not can_run_hosts():
        pytest.skip("simulated hosts need root and pycapnp (the node manager artifact)")
    site = tmp_path_factory.mktemp("contract-world") / "site"
    with world_with_hosts(site, f"pc-{secrets.token_hex(3)}", f"{os.getpid()}/provider-contract-harness") as w:
        yield w


@pytest.fixture(scope="module")
def connector(world: SimWorld, tmp_path_factory: pytest.TempPathFactory) -> ResourceConnector:
    return ResourceConnector(world, tmp_path_factory.mktemp("lsf-top"))


def daemon_holds_sim(world: SimWorld) -> bool:
    """Whether a daemon of the world's cluster holds provider sim's lease (the controller says)."""
    leases = admin.status(world.sim)["leases"]
    return any(x["provider"] == "sim" and f"/{world.cluster}-daemon-" in x["holder"] for x in leases)


def intents(world: SimWorld) -> list[str]:
    """The op ids of every request intent at the controller, in commit order."""
    return [f.op_id for f in world.facts() if f.kind == FactKind.REQUEST_INTENT]


def test_templates_request_poll_join_return_poll_and_nothing_is_left(
    world: SimWorld, connector: ResourceConnector
) -> None:
    templates = connector.ok("getAvailableTemplates", {})["templates"]
    offered = {t["templateId"]: t for t in templates}
    assert TEMPLATE in offered, f"getAvailableTemplates offers {sorted(offered)}"
    assert offered[TEMPLATE]["maxNumber"] >= 2
    assert offered[TEMPLATE]["attributes"]["ncpus"][0] == "Numeric"

    asked = {"template": {"templateId": TEMPLATE, "machineCount": 2}, "clientToken": "harness-create-1"}
    accepted = connector.ok("requestMachines", asked)
    request_id = accepted["requestId"]
    again = connector.ok("requestMachines", asked)  # the connector retries a call whose answer it lost
    assert again["requestId"] == request_id
    assert set(intents(world)) == {request_id}, intents(world)  # one op

    done = connector.complete(request_id, CREATE_DEADLINE)
    machines = done["machines"]
    assert len(machines) == 2 and {m["result"] for m in machines} == {"succeed"}, machines
    assert all(m["machineId"] and m["privateIpAddress"] and m["launchtime"] > 0 for m in machines), machines

    # Bootstrapped and joined: the controller has every machine as a host that joined.
    hosts = {h.host_name: h for h in world.hosts().values()}
    for machine in machines:
        host = hosts.get(machine["name"])
        assert host is not None and host.joined_at > 0, f"{machine['name']} not joined at the controller: {hosts}"
        assert host.instance_id == machine["machineId"]
    assert len(agree(world)) == 2

    back = [{"name": m["name"], "machineId": m["machineId"]} for m in machines]
    returned = connector.ok("requestReturnMachines", {"machines": back})
    finished = connector.complete(returned["requestId"], RETURN_DEADLINE)
    assert {m["result"] for m in finished["machines"]} == {"succeed"}, finished
    assert agree(world) == {}, "instances left in the simulated cloud"
    assert world.alive() == {}


HOSTILE: list[tuple[str, dict[str, Any] | bytes]] = [
    ("requestMachines", {"template": {"templateId": TEMPLATE, "machineCount": "2"}}),  # a string count
    ("requestMachines", {"template": {"templateId": TEMPLATE, "machineCount": True}}),
    ("requestMachines", {"template": {"templateId": TEMPLATE, "machineCount": 10**12}}),  # huge
    ("requestMachines", {"template": {"templateId": TEMPLATE, "machineCount": 0}}),
    ("requestMachines", {"template": {"templateId": "gpu.nowhere", "machineCount": 1}}),  # unknown template
    ("requestMachines", {"template": {"templateId": TEMPLATE + "\x1b[2J", "machineCount": 1}}),
    ("requestMachines", {"template": {"templateId": TEMPLATE}}),
    ("requestMachines", b"\x00\xff\xfe binary \x89PNG\r\n"),
    ("requestMachines", b'{"template": '),
    ("requestMachines", b"[" * 200_000),
    ("requestReturnMachines", {"machines": [{"name": "not-ours-1", "machineId": "i-0000"}]}),
    ("requestReturnMachines", {"machines": "everything"}),
    ("getRequestStatus", {"requests": [{"requestId": 7}]}),
]


@pytest.mark.parametrize(("action", "document"), HOSTILE, ids=[f"{a}-{n}" for n, (a, _) in enumerate(HOSTILE)])
def test_a_hostile_document_is_a_json_error_and_changes_nothing(
    world: SimWorld, connector: ResourceConnector, action: str, document: dict[str, Any] | bytes
) -> None:
    facts_before, alive_before = len(world.facts()), set(world.alive())
    code, answer = connector.call(action, document)
    assert code == 1, answer
    assert set(answer) == {"error", "message"} and answer["error"]["type"] in ("bad_input", "unknown_request"), answer
    assert answer["message"] == answer["error"]["message"]  # where LSF reads a failure's reason
    assert "\x1b" not in json.dumps(answer, ensure_ascii=False), "a control character came back raw"
    assert len(world.facts()) == facts_before, "a fact was written"
    assert set(world.alive()) == alive_before, "the cloud changed"


def at_once(connector: ResourceConnector, documents: list[dict[str, Any]]) -> list[str]:
    """``requestMachines.sh`` with each document, all started at once; the request ids answered.
    A call that finds the fence held by another of the contract's calls or workers waits for it
    (up to 30 s); one still refused ``held`` names the holder (never run beside it) and is
    called again, as a connector does; at least one call gets through at once."""
    procs = [connector.start("requestMachines", d) for d in documents]
    with ThreadPoolExecutor(len(procs)) as pool:
        first = list(pool.map(lambda p: connector.result(p, "requestMachines"), procs))
    assert all(code in (0, HELD) for code, _ in first), first
    refused = [held(answer) for code, answer in first if code == HELD]
    assert len(refused) < len(procs), f"every call refused: {refused}"
    answers = [
        answer if code == 0 else connector.ok("requestMachines", document)
        for (code, answer), document in zip(first, documents, strict=True)
    ]
    return [answer["requestId"] for answer in answers]


def give_back(connector: ResourceConnector, world: SimWorld, finished: list[dict[str, Any]]) -> None:
    """Return every machine of ``finished`` and see the cloud empty."""
    back = [{"name": m["name"], "machineId": m["machineId"]} for f in finished for m in f["machines"]]
    returned = connector.ok("requestReturnMachines", {"machines": back})
    connector.complete(returned["requestId"], RETURN_DEADLINE)
    assert agree(world) == {}


def test_the_same_request_from_three_scripts_at_once_is_one_op(world: SimWorld, connector: ResourceConnector) -> None:
    """Check and commit happen under one fence: three identical calls at once make one op."""
    before = set(intents(world))
    same = {"template": {"templateId": TEMPLATE, "machineCount": 1}, "clientToken": "harness-at-once"}
    ids = at_once(connector, [same, same, same])
    assert len(set(ids)) == 1, ids
    assert set(intents(world)) - before == {ids[0]}, intents(world)
    ended = connector.poll(ids[0], CREATE_DEADLINE)
    assert len(agree(world)) == 1  # no instance made twice, no open op, cloud and controller agree
    give_back(connector, world, [ended])


def test_the_same_request_from_three_scripts_at_once_completes_bootstrapped(
    world: SimWorld, connector: ResourceConnector
) -> None:
    """One worker per request: a repeated call never starts a second worker that would mark the
    request done while the first still bootstraps."""
    same = {"template": {"templateId": TEMPLATE, "machineCount": 1}, "clientToken": "harness-at-once-boot"}
    ids = at_once(connector, [same, same, same])
    finished = connector.complete(ids[0], CREATE_DEADLINE)
    assert {m["result"] for m in finished["machines"]} == {"succeed"}, finished
    give_back(connector, world, [finished])


def test_two_different_requests_at_once_both_complete(world: SimWorld, connector: ResourceConnector) -> None:
    """Two requests at once on one provider are serialised by its fence: two ops, both complete."""
    before = set(intents(world))
    documents = [
        {"template": {"templateId": TEMPLATE, "machineCount": 1}, "clientToken": f"harness-two-{n}"} for n in (1, 2)
    ]
    ids = at_once(connector, documents)
    assert len(set(ids)) == 2 and set(intents(world)) - before == set(ids), (ids, intents(world))
    finished = [connector.complete(rid, CREATE_DEADLINE) for rid in ids]
    assert len(agree(world)) == 2  # no instance made twice, no open op, cloud and controller agree
    give_back(connector, world, finished)


def test_provider_serve_answers_interleaved_requests_by_id(world: SimWorld, connector: ResourceConnector) -> None:
    env = {**connector.env, "XCEPROV_CONFIG": str(connector.conf_path / "conf" / "xceprov.yaml")}
    proc = subprocess.Popen(
        [connector.env["XCEPROV"], "provider", "serve"],
        cwd=connector.work,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    lines = [
        {"id": "status", "action": "getRequestStatus", "input": {"requests": [{"requestId": "op-nope"}]}},
        {"id": 1, "action": "getAvailableTemplates", "input": {}},
        {"id": "bad", "action": "requestMachines", "input": {"template": {"templateId": TEMPLATE}}},
        {"id": 2, "action": "getReturnRequests"},
    ]
    payload = b"".join(json.dumps(line).encode() + b"\n" for line in lines) + b"not json\n"
    try:
        out, err = proc.communicate(payload, timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err.decode(errors="replace")
    answers = [json.loads(line) for line in out.decode().splitlines()]
    by_id = {a["id"]: a for a in answers}
    assert len(answers) == 5 and set(by_id) == {"status", 1, "bad", 2, None}, answers
    assert by_id["status"]["result"]["requests"][0]["message"] == "Request not found"
    assert by_id[1]["result"] == connector.ok("getAvailableTemplates", {})
    assert by_id["bad"]["error"]["type"] == "bad_input"
    assert "requests" in by_id[2]["result"]
    assert by_id[None]["error"]["type"] == "bad_input"


def test_beside_a_running_daemon_a_mutation_is_refused_naming_it_and_changes_nothing(
    world: SimWorld, connector: ResourceConnector
) -> None:
    """The daemon holds the provider's lease: the scripts' mutations are refused ``held`` naming
    the daemon (never run beside it); reads still answer."""
    cfg: dict[str, Any] = yaml.safe_load((world.site / "xceprov.yaml").read_text())
    cfg["daemon"] = {"reconcile_interval": "2s", "stop_timeout": f"{STOP_TIMEOUT:g}s"}
    daemon_config = world.site / "daemon.yaml"  # the connector's own copy stays as it is
    daemon_config.write_text(yaml.safe_dump(cfg))
    facts_before, alive_before = len(world.facts()), set(world.alive())
    with running_daemon(world, "contract-daemon", {"XCEPROV_CONFIG": str(daemon_config)}) as daemon:
        # The controller's own view: the daemon may bootstrap a host left by an earlier test
        # before it writes its first status file.
        wait_until("the daemon's lease of sim", lambda: daemon_holds_sim(world) or not daemon.alive(), timeout=180)
        assert daemon.alive(), daemon.log()[-4000:]
        asked = {"template": {"templateId": TEMPLATE, "machineCount": 1}, "clientToken": "harness-daemon"}
        code, answer = connector.call("requestMachines", asked)
        assert code == HELD, answer
        assert held(answer).split("/")[1].startswith(f"{world.cluster}-daemon-"), answer
        code, answer = connector.call("requestReturnMachines", {"machines": [{"name": "any"}]})
        assert code in (HELD, 1), answer  # refused either way: held, or no such machine
        assert connector.ok("getAvailableTemplates", {})["templates"]
        assert len(world.facts()) == facts_before and set(world.alive()) == alive_before
        code, _took = daemon.terminate()
        assert code == 0, daemon.log()[-4000:]
