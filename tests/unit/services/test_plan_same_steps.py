"""The plan preview runs the create op's own steps: what it plans is what the op plans.

``xceprov plan`` renders, builds the variables and plans through the same step functions as the
executor's create (``orchestrator.ops.steps``), with the op's fencing left out. For the same
request (same op id), the variables Terraform is handed by the preview and by the op are equal
but for what only an op under the fence carries: the epoch in the owner tags and the root's
``fence`` variable (at its default, "", in the preview).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tffake import ROOT, FakeEngine, unit_executor

from orchestrator.configfile import LoadedConfig
from orchestrator.model import tags as owner
from orchestrator.services import plan as plan_service
from orchestrator.services.plan import plan_burst
from orchestrator.workspace.bundle import plan_path

OP_ID = "op-same-request"


def without_epoch(variables: dict[str, Any]) -> dict[str, Any]:
    """The variables without what only an op under the fence carries."""
    instances = {
        key: {**value, "tags": {k: v for k, v in value["tags"].items() if k != owner.EPOCH}}
        for key, value in variables["instances"].items()
    }
    return {**{k: v for k, v in variables.items() if k != "fence"}, "instances": instances}


def test_the_preview_plans_what_the_create_op_plans_for_the_same_request(
    loaded: LoadedConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(plan_service, "new_op_id", lambda: OP_ID)
    preview_engine = FakeEngine()
    preview = plan_burst(loaded, {"cpu": 2}, out=tmp_path / "bundle", toolkit_root=ROOT, engine=preview_engine)
    [previewed] = preview_engine.plan_variables
    saved = json.loads(plan_path(tmp_path / "bundle", "sim").read_text())["variables"]
    assert saved == previewed  # the bundle holds the plan of exactly those variables
    assert previewed["fence"] == ""  # a preview plans outside the fence
    assert [i.key for i in preview.providers[0].instances] == sorted(previewed["instances"])

    op_engine = FakeEngine()
    made = unit_executor(loaded, op_engine).create("sim", "cpu", 2, op_id=OP_ID)
    [op_planned] = op_engine.plan_variables  # nothing lost: the op's one plan before its apply
    assert op_planned["fence"] == "3.7"
    assert sorted(c.key for c in made.created) == sorted(previewed["instances"])
    assert without_epoch(op_planned) == without_epoch(previewed)
    assert {v["tags"][owner.EPOCH] for v in previewed["instances"].values()} == {owner.NO_EPOCH}
