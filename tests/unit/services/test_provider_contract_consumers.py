"""The provider contract as LSF's resource connector and a Symphony host factory really call it.

Neither sends a ``clientToken`` (every call is a new request), both ask about several requests
at once, LSF refuses template ids with an underscore and reads its own attribute names, a host
factory reads Symphony's, and both read a failure's top-level ``message``. Standalone, on the
fake engine (``tests/tffake.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tffake import ROOT, FakeEngine

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.errors import ConfigError
from orchestrator.services.contract.consumers import (
    GENERIC,
    HOST_FACTORY,
    LSF,
    Consumer,
    config_candidates,
    consumer_config,
    consumer_of,
    contract_config,
)
from orchestrator.services.provider_contract import ACTIONS, ContractAnswer, ProviderContract
from orchestrator.services.provider_requests import BadRequest, parse_request

SITE = """
cluster: unit
state_dir: {state}
standalone: true
controller: {{ca: system}}
providers:
  sim_eu: {{module: xcesim, max_instances: 10}}
templates:
  cpu_big:
    xce: {{type: X86_64, slots: 8, resources: {{mem: 32G, gpu: 2, xcehost: true, spare: false}}}}
    providers:
      sim_eu: {{flavor: c8.large, image: debian-12}}
  gpu:
    providers:
      sim_eu: {{flavor: g4.xlarge, image: debian-12}}
"""
UNKNOWN = "op-6b49d200-0123456789ab"


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def site(tmp_path: Path, text: str = SITE) -> LoadedConfig:
    return parse_config(text.format(state=tmp_path / "state"), str(tmp_path / "xceprov.yaml"), tmp_path)


def contract(loaded: LoadedConfig, consumer: Consumer = GENERIC, clock: Clock | None = None) -> ProviderContract:
    made = ProviderContract(
        loaded,
        spawn_worker=False,
        bootstrap=False,
        toolkit_root=ROOT,
        engine=FakeEngine(),
        clock=clock or Clock(),
        consumer=consumer,
    )
    made.session.fence_wait = 0.5
    return made


def intents(loaded: LoadedConfig) -> list[str]:
    path = loaded.config.state_dir / "facts" / "unit.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [fact["op_id"] for fact in map(json.loads, lines) if fact["kind"] == "requestIntent"]


def ok(answer: ContractAnswer) -> dict[str, Any]:
    assert answer.exit_code == 0, answer.document
    return answer.document


# ----- item 14: a fresh request per call --------------------------------------------------------


def test_the_same_ask_twice_without_a_client_token_is_two_requests(tmp_path: Path) -> None:
    loaded, clock = site(tmp_path), Clock()
    c = contract(loaded, clock=clock)
    doc = {"template": {"templateId": "gpu.sim_eu", "machineCount": 1}}
    first = ok(c.handle("requestMachines", doc))["requestId"]
    c.carry_out(first)
    clock.now += 5  # well within a minute: the scheduler wants one more machine of the same kind
    second = ok(c.handle("requestMachines", doc))
    assert second["requestId"] != first and "no new op" not in second["message"]
    c.carry_out(second["requestId"])
    assert intents(loaded) == [first, second["requestId"]]
    status = ok(c.handle("getRequestStatus", {"requests": [{"requestId": first}, {"requestId": second["requestId"]}]}))
    assert [len(r["machines"]) for r in status["requests"]] == [1, 1]


def test_the_same_client_token_is_still_one_request(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    c = contract(loaded)
    doc = {"template": {"templateId": "gpu.sim_eu", "machineCount": 1}, "clientToken": "t-1"}
    first = ok(c.handle("requestMachines", doc))["requestId"]
    again = ok(c.handle("requestMachines", doc))
    assert again["requestId"] == first and "the same clientToken" in again["message"]
    assert intents(loaded) == [first]


# ----- item 15: each requestId on its own --------------------------------------------------------


def test_an_unknown_request_beside_known_ones_is_answered_on_its_own(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    c = contract(loaded)
    known = ok(c.handle("requestMachines", {"template": {"templateId": "gpu.sim_eu", "machineCount": 1}}))["requestId"]
    c.carry_out(known)
    asked = [UNKNOWN, known, "not-a-request"]
    answer = ok(c.handle("getRequestStatus", {"requests": [{"requestId": r} for r in asked]}))
    assert [r["requestId"] for r in answer["requests"]] == asked
    by_id = {r["requestId"]: r for r in answer["requests"]}
    assert by_id[known]["status"] == "complete"
    for unknown in (UNKNOWN, "not-a-request"):
        assert by_id[unknown] == {
            "requestId": unknown,
            "status": "complete_with_error",
            "machines": [],
            "message": "Request not found",
        }


# ----- item 16: each consumer's names; failures with a top-level message; launch times ----------


def test_under_lsf_templates_carry_lsf_attributes_and_ids_without_underscores(tmp_path: Path) -> None:
    loaded = site(tmp_path)
    c = contract(loaded, LSF)
    offered = {t["templateId"]: t for t in ok(c.handle("getAvailableTemplates", {}))["templates"]}
    assert sorted(offered) == ["cpu-big.sim-eu", "gpu.sim-eu"]
    assert all("_" not in template_id for template_id in offered)
    assert offered["cpu-big.sim-eu"]["attributes"] == {
        "type": ["String", "X86_64"],
        "ncpus": ["Numeric", "8"],
        "ncores": ["Numeric", "8"],
        "mem": ["Numeric", "32768"],
        "gpu": ["Numeric", "2"],
        "xcehost": ["Boolean", "1"],
        "spare": ["Boolean", "0"],
    }
    # LSF asks by the id it was given; the request is made of the configured template.
    asked = ok(c.handle("requestMachines", {"template": {"templateId": "cpu-big.sim-eu", "machineCount": 1}}))
    assert "cpu-big.sim-eu" in asked["message"]
    c.carry_out(asked["requestId"])
    status = ok(c.handle("getRequestStatus", {"requests": [{"requestId": asked["requestId"]}]}))
    assert status["requests"][0]["status"] == "complete"


def test_under_a_host_factory_templates_carry_symphony_attributes(tmp_path: Path) -> None:
    c = contract(site(tmp_path), HOST_FACTORY)
    offered = {t["templateId"]: t for t in ok(c.handle("getAvailableTemplates", {}))["templates"]}
    assert sorted(offered) == ["cpu_big.sim_eu", "gpu.sim_eu"]
    attributes = offered["cpu_big.sim_eu"]["attributes"]
    assert attributes["nram"] == ["Numeric", "32768"] and "mem" not in attributes
    assert attributes["ncpus"] == ["Numeric", "8"] and attributes["ncores"] == ["Numeric", "8"]
    assert attributes["type"] == ["String", "X86_64"]
    assert attributes["xcehost"] == ["Numeric", "1"]  # Symphony's attributes are String or Numeric


def test_two_names_that_read_the_same_without_underscores_are_refused_under_lsf(tmp_path: Path) -> None:
    text = SITE.replace("  gpu:\n", "  cpu-big:\n")
    c = contract(site(tmp_path, text), LSF)
    answer = c.handle("getAvailableTemplates", {})
    assert answer.exit_code == 3, answer.document
    assert "cpu_big" in answer.document["message"] and "cpu-big" in answer.document["message"]
    assert ok(contract(site(tmp_path, text), HOST_FACTORY).handle("getAvailableTemplates", {}))["templates"]


@pytest.mark.parametrize("consumer", [LSF, HOST_FACTORY, GENERIC])
def test_every_failure_carries_a_top_level_message(tmp_path: Path, consumer: Consumer) -> None:
    c = contract(site(tmp_path), consumer)
    for action, document in (
        ("requestMachines", {"template": {"templateId": "nowhere", "machineCount": 1}}),
        ("requestReturnMachines", {"machines": [{"name": "nobody"}]}),
        ("getRequestStatus", b"not json"),
    ):
        answer = c.handle(action, document)
        assert answer.exit_code == 1
        assert answer.document["message"] == answer.document["error"]["message"] != ""


def test_a_returns_machines_carry_their_launch_time(tmp_path: Path) -> None:
    loaded, clock = site(tmp_path), Clock()
    c = contract(loaded, clock=clock)
    made = ok(c.handle("requestMachines", {"template": {"templateId": "gpu.sim_eu", "machineCount": 2}}))["requestId"]
    c.carry_out(made)
    machines = ok(c.handle("getRequestStatus", {"requests": [{"requestId": made}]}))["requests"][0]["machines"]
    launched = {m["name"]: m["launchtime"] for m in machines}
    assert all(launched.values())
    clock.now += 600
    back = {"machines": [{"name": m["name"], "machineId": m["machineId"]} for m in machines]}
    returned = ok(c.handle("requestReturnMachines", back))["requestId"]
    for _ in range(2):  # while it runs, and once it is done
        status = ok(c.handle("getRequestStatus", {"requests": [{"requestId": returned}]}))["requests"][0]
        assert {m["name"]: m["launchtime"] for m in status["machines"]} == launched, status
        c.carry_out(returned)


# ----- item 18: one parser, refusing duplicate keys -----------------------------------------------

DUPLICATES = [
    ("machineCount twice", b'{"template": {"templateId": "gpu.sim_eu", "machineCount": 1, "machineCount": 3}}'),
    ("template twice", b'{"template": {"templateId": "gpu.sim_eu", "machineCount": 1}, "template": {}}'),
    (
        "both spellings",
        b'{"template": {"templateId": "gpu.sim_eu", "templateID": "cpu_big.sim_eu", "machineCount": 1}}',
    ),
    ("NaN", b'{"template": {"templateId": "gpu.sim_eu", "machineCount": NaN}}'),
]


@pytest.mark.parametrize("raw", [d[1] for d in DUPLICATES], ids=[d[0] for d in DUPLICATES])
def test_duplicate_keys_are_refused_by_the_one_shot_form_and_serve_alike(tmp_path: Path, raw: bytes) -> None:
    loaded = site(tmp_path)
    c = contract(loaded)
    one_shot = c.handle("requestMachines", raw)
    assert one_shot.exit_code == 1, one_shot.document
    assert one_shot.document["error"]["type"] == "bad_input"
    line = b'{"id": 1, "action": "requestMachines", "input": ' + raw + b"}"
    parsed = parse_request(line, ACTIONS)
    served = (
        parsed.message
        if isinstance(parsed, BadRequest)
        else c.handle(parsed.action, parsed.document).document["error"]["message"]
    )
    for message in (one_shot.document["error"]["message"], served):
        assert any(word in message for word in ("twice", "templateID", "NaN")), message
    assert intents(loaded) == []


# ----- item 13: where each consumer keeps the configuration ----------------------------------------


@pytest.mark.parametrize(
    ("environ", "consumer", "looked"),
    [
        ({"PRO_CONF_DIR": "/lsf/conf/resource_connector/x"}, LSF, ["/lsf/conf/resource_connector/x/conf"]),
        # A relative confPath, as hostProviders.json may write it: under <LSF_TOP>/conf.
        ({"PRO_CONF_DIR": "resource_connector/x", "PRO_LSF_TOP": "/lsf"}, LSF, ["/lsf/conf/resource_connector/x/conf"]),
        ({"PRO_LSF_TOP": "/lsf", "PROVIDER_NAME": "x"}, LSF, ["/lsf/conf/resource_connector/x/conf"]),
        (
            {"HF_PROVIDER_CONFDIR": "/hf/p", "HF_CONFDIR": "/hf", "HF_PROVIDER_NAME": "x"},
            HOST_FACTORY,
            ["/hf/p", "/hf/providers/x"],
        ),
        ({"HF_CONFDIR": "/hf", "HF_PROVIDER_NAME": "x"}, HOST_FACTORY, ["/hf/providers/x"]),
        ({"HF_WORKDIR": "/w"}, HOST_FACTORY, []),
        ({"PRO_CONF_DIR": "/l", "XCEPROV_CONSUMER": "none"}, GENERIC, []),
        ({}, GENERIC, []),
    ],
)
def test_each_consumer_is_told_by_its_environment_and_its_configuration_looked_for_where_it_keeps_it(
    environ: dict[str, str], consumer: Consumer, looked: list[str]
) -> None:
    assert consumer_of(environ) == consumer
    assert config_candidates(consumer, environ) == [Path(p) / "xceprov.yaml" for p in looked]
    if consumer != GENERIC:
        with pytest.raises(ConfigError, match="no configuration found"):
            consumer_config(consumer, environ)


def test_an_unknown_xceprov_consumer_is_refused() -> None:
    with pytest.raises(ConfigError, match="XCEPROV_CONSUMER='slurm'"):
        consumer_of({"XCEPROV_CONSUMER": "slurm"})


def test_xceprov_config_wins_over_where_the_consumer_keeps_it(tmp_path: Path) -> None:
    chosen = tmp_path / "chosen.yaml"
    chosen.write_text(SITE.format(state=tmp_path / "state"))
    environ = {"HF_CONFDIR": str(tmp_path / "nowhere"), "HF_PROVIDER_NAME": "x", "XCEPROV_CONFIG": str(chosen)}
    loaded, consumer = contract_config(None, environ)
    assert (loaded.source, consumer) == (str(chosen), HOST_FACTORY)
    with pytest.raises(ConfigError, match="no configuration found"):
        contract_config(None, {k: v for k, v in environ.items() if k != "XCEPROV_CONFIG"})
