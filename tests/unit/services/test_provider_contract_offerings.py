"""The provider contract says the offerings: each template's (with its cheapest price) and the
one each machine of a request was placed on."""

from __future__ import annotations

from pathlib import Path

from tffake import SITE, FakeEngine

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.model.offerings import Placement, placement_detail
from orchestrator.reconcile.offers import default_names
from orchestrator.services.contract.ledger import machines
from tests.unit.services.test_provider_contract import ask, contract

WIDE = """
  wide:
    providers:
      sim:
        image: debian-12
        cost_per_hour: 0.5
        offerings:
          - {{flavor: c16.large, zone: zone-b, cost_per_hour: 0.8, slots: 2}}
          - {{flavor: c8.large, cost_per_hour: 0.3}}
"""


def standalone(tmp_path: Path) -> LoadedConfig:
    text = (SITE + WIDE).format(cluster="unit", state=tmp_path / "state")
    loaded = parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)
    return LoadedConfig(loaded.config.model_copy(update={"standalone": True}), loaded.source, loaded.base_dir)


def test_templates_list_their_offerings_and_cost_the_cheapest(tmp_path: Path) -> None:
    answer = ask(contract(standalone(tmp_path), FakeEngine()), "getAvailableTemplates", b"{}")
    by_id = {t["templateId"]: t for t in answer.document["templates"]}
    assert by_id["wide.sim"]["offerings"] == [
        {
            "name": "c16.large@zone-b",
            "flavor": "c16.large",
            "zone": "zone-b",
            "subnet": None,
            "pricePerHour": 0.8,
            "slots": 2,
        },
        {"name": "c8.large", "flavor": "c8.large", "zone": None, "subnet": None, "pricePerHour": 0.3, "slots": 1},
    ]
    assert by_id["wide.sim"]["pricePerHour"] == 0.3
    assert [o["name"] for o in by_id["cpu.sim"]["offerings"]] == ["c8.large"]
    assert by_id["cpu.sim"]["pricePerHour"] == 0.5


def test_each_machine_of_a_request_names_its_offering(tmp_path: Path) -> None:
    loaded, engine = standalone(tmp_path), FakeEngine()
    c = contract(loaded, engine)
    request = ask(c, "requestMachines", {"template": {"templateId": "wide.sim", "machineCount": 2}}).document
    c.carry_out(request["requestId"])
    status = ask(c, "getRequestStatus", {"requests": [{"requestId": request["requestId"]}]}).document
    # A contract request is placed by no policy: its template's default offering (the first listed).
    assert [m["offering"] for m in status["requests"][0]["machines"]] == ["c16.large@zone-b"] * 2


def test_a_machine_placed_by_an_op_names_that_offering(tmp_path: Path) -> None:
    loaded = standalone(tmp_path)
    op, epoch = "op-6b49d200-0123456789ab", Epoch(1, 1)
    detail = placement_detail([Placement("c8.large", 1), Placement("c16.large@zone-b", 1)])
    facts = [
        Fact(FactKind.REQUEST_INTENT, "sim", op, epoch, template="wide", count=2, detail=detail, fact_id=1),
        *(
            Fact(FactKind.INSTANCE_CREATED, "sim", op, epoch, f"{op}-00{i}", f"i-{i}", "wide", fact_id=2 + i)
            for i in range(2)
        ),
    ]
    found = machines(facts, default_names(loaded.config))
    assert [m.offering for m in found.values()] == ["c8.large", "c16.large@zone-b"]
