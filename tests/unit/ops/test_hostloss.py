"""Host loss rules (orchestrator/ops/hostloss.py): at once when the cloud says why, else after two reads."""

from __future__ import annotations

import json
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from orchestrator.clients.terraform.messages import PlanResult, ResourceChange, Summary
from orchestrator.errors import FinalError
from orchestrator.ops.hostloss import MISSING, SUSPECTS_FILE, LossTracker
from orchestrator.ops.losses import observer_for
from orchestrator.workspace.cloudview import CloudObject, Drift, Listing


def obj(instance_id: str, state: str = "terminated", reason: str = "") -> CloudObject:
    return CloudObject(
        id=instance_id,
        name=f"h-{instance_id}",
        address="10.213.0.9",
        tags={"xce:cluster": "unit"},
        state=state,
        state_reason=reason,
        launch_time="2026-12-01T08:00:00Z",
    )


def listing(*objects: CloudObject) -> Listing:
    return Listing(supported=True, objects=list(objects))


@pytest.fixture
def tracker(tmp_path: Path) -> LossTracker:
    return LossTracker(tmp_path / SUSPECTS_FILE)


def test_spot_reclaim_and_expiry_are_lost_at_once(tracker: LossTracker) -> None:
    drift = Drift(deleted={"op1-0": "i-a", "op1-1": "i-b"})
    lost = tracker.observe(drift, listing(obj("i-a", reason="spot-reclaim"), obj("i-b", reason="expired")))
    assert [(x.instance_key, x.instance_id, x.reason) for x in lost] == [
        ("op1-0", "i-a", "spot-reclaim"),
        ("op1-1", "i-b", "expired"),
    ]
    evidence = lost[0].evidence
    assert evidence["listing"] == {"state": "terminated", "state_reason": "spot-reclaim", "name": "h-i-a"}
    assert evidence["observations_missing"] == 1 and evidence["drift"] == "deleted"
    json.dumps(evidence)  # the fact's detail must be JSON


def test_the_clouds_termination_time_goes_into_the_evidence(tracker: LossTracker) -> None:
    ended = replace(obj("i-a", reason="spot-reclaim"), terminated_at="2026-12-01T09:00:00Z")
    (lost,) = tracker.observe(Drift(deleted={"op1-0": "i-a"}), listing(ended))
    assert lost.evidence["listing"]["terminated_at"] == "2026-12-01T09:00:00Z"


def test_an_unexplained_delete_needs_two_consecutive_observations(tracker: LossTracker) -> None:
    drift = Drift(deleted={"op1-0": "i-a"})
    out_of_band = listing(obj("i-a", reason="out-of-band-delete"))
    assert tracker.observe(drift, out_of_band) == []
    assert tracker.suspects()["op1-0"]["missing"] == 1
    (lost,) = tracker.observe(drift, out_of_band)
    assert (lost.instance_key, lost.instance_id, lost.reason) == ("op1-0", "i-a", MISSING)
    assert lost.evidence["observations_missing"] == 2
    assert lost.evidence["first_missing"] == tracker.suspects()["op1-0"]["first_missing"]


def test_without_a_listing_only_the_two_observation_rule_applies(tracker: LossTracker) -> None:
    drift = Drift(deleted={"op1-0": "i-a"})
    assert tracker.observe(drift, None) == []
    (lost,) = tracker.observe(drift, None)
    assert lost.reason == MISSING and lost.evidence["listing"] is None
    # An unsupported listing (openstack) says nothing either, even if it carried objects.
    other = LossTracker(tracker.path.with_name("other.json"))
    unsupported = Listing(supported=False, objects=[obj("i-a", reason="spot-reclaim")])
    assert other.observe(drift, unsupported) == []


def test_a_suspect_seen_again_is_forgiven(tracker: LossTracker) -> None:
    drift = Drift(deleted={"op1-0": "i-a"})
    assert tracker.observe(drift, None) == []
    assert tracker.observe(Drift(), None) == []  # back in the refresh: forgiven
    assert tracker.suspects() == {}
    # Counting starts afresh: one more absence is not yet a loss.
    assert tracker.observe(drift, None) == []


def test_listed_alive_contradicts_the_drift_and_is_not_counted(tracker: LossTracker) -> None:
    drift = Drift(deleted={"op1-0": "i-a"})
    assert tracker.observe(drift, None) == []
    assert tracker.observe(drift, listing(obj("i-a", state="running"))) == []
    assert tracker.suspects() == {}
    assert tracker.observe(drift, None) == []


def test_observations_must_be_consecutive_for_the_same_instance(tracker: LossTracker) -> None:
    assert tracker.observe(Drift(deleted={"op1-0": "i-a"}), None) == []
    # The key now names another instance (a re-create that vanished too): a new suspect.
    assert tracker.observe(Drift(deleted={"op1-0": "i-z"}), None) == []
    assert tracker.suspects()["op1-0"] == {
        "instance_id": "i-z",
        "missing": 1,
        "first_missing": tracker.suspects()["op1-0"]["first_missing"],
    }
    (lost,) = tracker.observe(Drift(deleted={"op1-0": "i-z"}), None)
    assert lost.instance_id == "i-z"


def test_a_lost_instance_is_reported_again_until_it_leaves_the_drift(tracker: LossTracker) -> None:
    # The executor may crash between observe() and the lost fact: nothing is forgotten.
    drift = Drift(deleted={"op1-0": "i-a", "op1-1": "i-b"})
    tracker.observe(drift, None)
    first = tracker.observe(drift, None)
    again = tracker.observe(drift, None)
    assert [x.instance_key for x in first] == [x.instance_key for x in again] == ["op1-0", "op1-1"]
    # Once removed from the desired set and applied, the state no longer has them.
    assert tracker.observe(Drift(), None) == []
    assert tracker.suspects() == {}


def test_changed_instances_are_not_losses(tracker: LossTracker) -> None:
    drift = Drift(changed={"op1-0": ["tags"]})
    assert tracker.observe(drift, None) == tracker.observe(drift, None) == []
    assert not tracker.path.exists()  # nothing to remember, nothing written


def test_suspects_survive_a_restart_in_a_private_file(tmp_path: Path) -> None:
    path = tmp_path / "work" / SUSPECTS_FILE
    drift = Drift(deleted={"op1-0": "i-a"})
    assert LossTracker(path).observe(drift, None) == []
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # A new process (a new tracker) continues the count: the second read is the loss.
    (lost,) = LossTracker(path).observe(drift, None)
    assert lost.instance_key == "op1-0"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        ('{"format": 9, "suspects": {}}', "not a suspects file of format 1"),
        ('{"format": 1, "suspects": {"op1-0": {"instance_id": "i-a", "missing": "2"}}}', "suspect 'op1-0'"),
        ('{"format": 1, "suspects": {"op1-0": {"instance_id": 3, "missing": 1, "first_missing": ""}}}', "needs"),
    ],
)
def test_a_damaged_suspects_file_is_reported_naming_it(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / SUSPECTS_FILE
    path.write_text(content)
    with pytest.raises(FinalError, match=message) as err:
        LossTracker(path).observe(Drift(deleted={"op1-0": "i-a"}), None)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


DELETED = ResourceChange('x["op1-000"]', "", "xcesim_instance", "x", "op1-000", "delete")


class ShardCloud:
    """A refresh-only plan per working directory: shard 1 lost ``i-a`` and has no listing; shard 0 lists it."""

    def __init__(self, shard0: Path) -> None:
        self.shard0 = shard0
        self.plans: list[Path] = []
        self.shown: list[Path] = []

    def plan(self, workdir: Path, **_kwargs: object) -> PlanResult:
        self.plans.append(Path(workdir))
        drift = [] if Path(workdir) == self.shard0 else [DELETED]
        return PlanResult((), tuple(drift), (), Summary(0, 0, 0), has_changes=bool(drift))

    def output(self, _workdir: Path) -> dict[str, object]:
        """Shard 1's state: the instance the refresh found deleted."""
        return {"instances": {"op1-000": {"id": "i-a", "name": "h-a", "address": "", "tags": {}}}}

    def show_plan(self, workdir: Path, _plan_file: Path) -> dict[str, object]:
        self.shown.append(Path(workdir))
        if Path(workdir) == self.shard0:
            tagged = {
                "i-a": {
                    "id": "i-a",
                    "name": "h-a",
                    "address": "",
                    "tags": {},
                    "state": "terminated",
                    "state_reason": "spot-reclaim",
                    "launch_time": "2026-12-01T08:00:00Z",
                }
            }
            return {"planned_values": {"outputs": {"tagged_supported": {"value": True}, "tagged": {"value": tagged}}}}
        raise AssertionError("shard 1's drift is read from its plan's stream, never from show -json")


def test_a_shard_without_a_listing_takes_the_clouds_reason_from_shard_zero(tmp_path: Path) -> None:
    shard0 = tmp_path / "sim"
    shard1 = shard0 / "shards" / "1"
    for path in (shard0, shard1):
        path.mkdir(parents=True, exist_ok=True)
        (path / "desired.tfvars.json").write_text("{}")
    cloud = ShardCloud(shard0)
    lost = observer_for(cloud, shard1).observe()  # type: ignore[arg-type]
    # One observation is enough: shard 0's listing says the cloud reclaimed it.
    assert [(x.instance_key, x.reason) for x in lost] == [("op1-000", "spot-reclaim")]
    assert cloud.plans == [shard1, shard0]


def test_nothing_deleted_reads_no_listing(tmp_path: Path) -> None:
    """The check before every create: one refresh-only plan, no ``show -json`` when nothing went missing."""
    shard0 = tmp_path / "sim"
    shard0.mkdir()
    (shard0 / "desired.tfvars.json").write_text("{}")
    cloud = ShardCloud(shard0)
    assert observer_for(cloud, shard0).observe() == []  # type: ignore[arg-type]
    assert cloud.plans == [shard0] and cloud.shown == []


def test_an_op_plan_is_one_observation_and_runs_no_terraform(tmp_path: Path) -> None:
    """``record``: the refresh of the op's own plan counts; nothing deleted forgives every suspect."""
    shard0 = tmp_path / "sim"
    shard0.mkdir()
    (shard0 / "desired.tfvars.json").write_text("{}")
    cloud = ShardCloud(shard0)
    observer = observer_for(cloud, shard0)  # type: ignore[arg-type]
    tracker = LossTracker(shard0 / SUSPECTS_FILE)
    tracker.observe(Drift(deleted={"op1-000": "i-a"}), None)  # an earlier read found it missing

    clean = PlanResult((), (), (), Summary(1, 0, 0), has_changes=True)
    assert observer.record(clean) == Drift()
    assert tracker.suspects() == {}  # seen present: forgiven, the count starts afresh

    # A deletion counts once and declares nothing: one read alone never makes a loss.
    deleted = PlanResult((), (DELETED,), (), Summary(1, 0, 0), has_changes=True)
    assert observer.record(deleted).deleted == {"op1-000": "i-a"}
    assert tracker.suspects()["op1-000"]["missing"] == 1
    assert cloud.plans == [] and cloud.shown == []
