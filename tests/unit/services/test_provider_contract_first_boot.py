"""A first-boot host's outcome in the provider contract's machine ``result`` (getRequestStatus).

What a user would notice (LSF's resource connector, a Symphony host factory): a machine whose
first boot failed is ``fail`` with the step and the host's message, one that joined is
``succeed``, one that never joined by its deadline is ``fail`` saying what its console last
showed, and the request ends ``complete_with_error``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tffake import FakeEngine

from orchestrator.model.bootresult import JOINED, FirstBootKind, FirstBootOutcome
from tests.unit.services.test_provider_contract import ask, contract, standalone


def test_first_boot_outcomes_are_the_machines_results(tmp_path: Path) -> None:
    loaded = standalone(tmp_path)
    c = contract(loaded, FakeEngine())
    request = ask(c, "requestMachines", {"template": {"templateId": "cpu.sim", "machineCount": 3}}).document[
        "requestId"
    ]
    c.carry_out(request)
    made = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]["machines"]
    joined, failed, silent = sorted(m["name"] for m in made)
    # What a first-boot join wait records per host once it ends (FirstBootOutcome.bootstrap_outcome).
    outcomes = {
        joined: JOINED,
        failed: FirstBootOutcome(FirstBootKind.FAILED, "join", "the controller refused the token"),
        silent: FirstBootOutcome(FirstBootKind.STARTED),
    }
    path = loaded.config.state_dir / "contract" / "requests" / f"{request}.json"
    record = json.loads(path.read_text())
    record.update(bootstrap=True, hosts={name: o.bootstrap_outcome() for name, o in outcomes.items()})
    path.write_text(json.dumps(record))
    status = ask(c, "getRequestStatus", {"requests": [{"requestId": request}]}).document["requests"][0]
    machines = {m["name"]: (m["result"], m["message"]) for m in status["machines"]}
    assert machines[joined] == ("succeed", "bootstrapped")
    assert machines[failed] == ("fail", "first boot failed at step join: the controller refused the token")
    assert machines[silent] == ("fail", "first boot not joined by its join_deadline (started, not joined)")
    assert status["status"] == "complete_with_error"
