"""Cloud views from a plan document (orchestrator/workspace/cloudview.py): what is believed, what is refused."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from tffake import FakeEngine

from orchestrator.clients.terraform.messages import PlanResult
from orchestrator.errors import TerraformError
from orchestrator.model.labels import AS_IS  # the simulated cloud labels with the tags as they are
from orchestrator.workspace import cloudview
from orchestrator.workspace.cloudview import drift_from_plan, listing_from_plan, read_views
from orchestrator.workspace.desired import DESIRED


def drifted(
    key: object, actions: list[str], before: object, after: object, rtype: str = "xcesim_instance"
) -> dict[str, Any]:
    return {
        "address": f'module.instances.{rtype}.this["{key}"]',
        "mode": "managed",
        "type": rtype,
        "name": "this",
        "index": key,
        "change": {"actions": actions, "before": before, "after": after},
    }


def listed(instance_id: str, **over: object) -> dict[str, Any]:
    value: dict[str, Any] = {
        "id": instance_id,
        "name": f"h-{instance_id}",
        "address": "10.213.0.5",
        "launch_time": "2026-12-01T08:00:00Z",
        "state": "running",
        "state_reason": "",
        "tags": {"xce:cluster": "unit"},
    }
    value.update(over)
    return value


def plan_doc(tagged: object, supported: object = True, drift: Sequence[object] = ()) -> dict[str, Any]:
    return {
        "resource_drift": list(drift),
        "planned_values": {"outputs": {"tagged": {"value": tagged}, "tagged_supported": {"value": supported}}},
    }


def test_drift_maps_instance_resources_to_keys_and_ids() -> None:
    before = {"id": "i-1", "tags": {"a": "1"}, "name": "h"}
    doc = plan_doc(
        {},
        drift=[
            drifted("op1-0", ["delete"], before, None),
            drifted("op1-1", ["update"], {**before, "id": "i-2"}, {**before, "id": "i-2", "tags": {"a": "2"}}),
            drifted("op1-2", ["delete"], {"id": "i-3"}, None, rtype="aws_instance"),
            drifted("op1-3", ["delete"], {"id": "i-4"}, None, rtype="openstack_compute_instance_v2"),
            # Not an instance resource, or not managed: says nothing about hosts.
            drifted("x", ["delete"], {"id": "vol-1"}, None, rtype="aws_ebs_volume"),
            {**drifted("op1-9", ["delete"], {"id": "i-9"}, None), "mode": "data"},
        ],
    )
    drift = drift_from_plan(doc)
    assert drift.deleted == {"op1-0": "i-1", "op1-2": "i-3", "op1-3": "i-4"}
    assert drift.changed == {"op1-1": ["tags"]}
    assert drift_from_plan({}).deleted == {}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (drifted(3, ["delete"], {"id": "i-1"}, None), "instance key 3 is not an instance key"),
        (drifted("bad key!", ["delete"], {"id": "i-1"}, None), "is not an instance key"),
        (drifted("op1-0", ["delete"], None, None), "without its former values"),
        (drifted("op1-0", ["delete"], {"id": 7}, None), "id: 7 is not a string"),
        (drifted("op1-0", ["delete"], {"id": "i" * 300}, None), "is not a string of 1 to 256"),
        (drifted("op1-0", ["update"], {"id": "i"}, "x"), "without its values"),
    ],
)
def test_malformed_drift_is_refused_in_one_line(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(TerraformError, match=message) as err:
        drift_from_plan(plan_doc({}, drift=[entry]))
    assert "\n" not in str(err.value)


def test_listing_reads_every_field() -> None:
    doc = plan_doc(
        {
            "i-2": listed("i-2", launch_time="2026-12-01T09:00:00Z", address=None),
            "i-1": listed("i-1", state="terminated", state_reason="spot-reclaim", terminated_at="2026-12-01T10:00:00Z"),
            "i-3": {k: v for k, v in listed("i-3").items() if k != "state_reason"},  # aws: no reason
        }
    )
    listing = listing_from_plan(doc, AS_IS)
    assert listing.supported
    assert [o.id for o in listing.objects] == ["i-1", "i-3", "i-2"]  # oldest first
    by_id = listing.by_id()
    assert (by_id["i-1"].state, by_id["i-1"].state_reason) == ("terminated", "spot-reclaim")
    assert by_id["i-1"].terminated_at == "2026-12-01T10:00:00Z" and by_id["i-3"].terminated_at == ""
    assert by_id["i-2"].address == "" and by_id["i-3"].state_reason == ""
    assert by_id["i-2"].tags == {"xce:cluster": "unit"} and by_id["i-2"].name == "h-i-2"


def test_a_listed_address_that_is_not_one_matches_no_host() -> None:
    """The object is still listed (it exists), but ``10.213.0.5,*`` is no address: "" as if
    unaddressed, so it can never match a live host by address."""
    doc = plan_doc({"i-1": listed("i-1", address="10.213.0.5,*"), "i-2": listed("i-2", address="10.213.0.6\n*")})
    assert {o.id: o.address for o in listing_from_plan(doc, AS_IS).objects} == {"i-1": "", "i-2": ""}


def test_an_unsupported_listing_says_nothing() -> None:
    listing = listing_from_plan(plan_doc({"i-1": listed("i-1")}, supported=False), AS_IS)
    assert not listing.supported and listing.objects == []


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({}, "no root outputs"),
        ({"planned_values": {"outputs": {}}}, "no known output tagged_supported"),
        (plan_doc({}, supported="yes"), "'yes' is not true or false"),
        (plan_doc([]), "not a map of cloud id to object"),
        (plan_doc({"i-1": "x"}), r"tagged\['i-1'\]: not an object"),
        (plan_doc({"i-1": listed("i-2")}), "keyed by another id"),
        (plan_doc({"i-1": listed("i-1", tags={"k": 1})}), r"tags\['k'\]: 1 is not a string"),
        (plan_doc({"i-1": listed("i-1", tags={str(n): "v" for n in range(300)})}), "at most 256"),
        (plan_doc({"i-1": listed("i-1", name="n" * 5000)}), "name: 'nnn"),
        (plan_doc({"i-1": listed("i-1", state=["running"])}), "state"),
    ],
)
def test_malformed_listing_is_refused_in_one_line(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(TerraformError, match=message) as err:
        listing_from_plan(doc, AS_IS)
    assert "\n" not in str(err.value)


def test_sizes_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cloudview, "MAX_OBJECTS", 2)
    with pytest.raises(TerraformError, match="3 objects, more than 2"):
        listing_from_plan(plan_doc({f"i-{n}": listed(f"i-{n}") for n in range(3)}), AS_IS)
    with pytest.raises(TerraformError, match="3 drifted resources, more than 2"):
        drift_from_plan(plan_doc({}, drift=[drifted(f"op1-{n}", ["delete"], {"id": "i"}, None) for n in range(3)]))


class PlanEngine(FakeEngine):
    """The fake engine, whose saved plans show ``document`` (or fail to show: a cloud not read)."""

    def __init__(self, document: dict[str, Any], fail: bool = False) -> None:
        super().__init__()
        self.document = document
        self.fail = fail
        self.plans: list[dict[str, Any]] = []

    def plan(self, workdir: Path, *args: Any, **kwargs: Any) -> PlanResult:
        self.plans.append(kwargs)
        return super().plan(workdir, *args, **kwargs)

    def show_plan(self, workdir: Path, plan_file: Path) -> dict[str, Any]:
        assert (workdir / plan_file).is_file()
        if self.fail:
            raise TerraformError("Error: InternalError: simulated API failure during list")
        return self.document


def test_read_views_runs_one_refresh_only_plan_and_removes_it(tmp_path: Path) -> None:
    (tmp_path / DESIRED).write_text(json.dumps({"instances": {}}))
    doc = plan_doc({"i-1": listed("i-1")}, drift=[drifted("op1-0", ["delete"], {"id": "i-0"}, None)])
    engine = PlanEngine(doc)
    views = read_views(engine, tmp_path, AS_IS)
    assert views.drift.deleted == {"op1-0": "i-0"} and [o.id for o in views.listing.objects] == ["i-1"]
    (plan,) = engine.plans
    assert plan["refresh_only"] and not plan.get("destroy") and plan["var_files"] == [Path(DESIRED)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [DESIRED]


def test_read_views_failure_is_a_terraform_error_and_leaves_no_plan(tmp_path: Path) -> None:
    with pytest.raises(TerraformError, match="no desired set"):
        cloudview.read_drift(PlanEngine({}), tmp_path)
    (tmp_path / DESIRED).write_text("{}")
    with pytest.raises(TerraformError, match="simulated API failure"):
        cloudview.read_listing(PlanEngine({}, fail=True), tmp_path, AS_IS)
    assert sorted(p.name for p in tmp_path.iterdir()) == [DESIRED]
