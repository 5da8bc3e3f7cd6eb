"""Class (e): a bake's builder still in the cloud, or a baked image no desired set keeps, is
reported (never acted on); a builder without a fact is never class (b)."""

from __future__ import annotations

from orchestrator.model.facts import Epoch, Fact, FactKind
from orchestrator.model.images import BakedImage
from orchestrator.orphans.classes import CLASS_E, REPORT, FactIndex, bake_leftovers, tagged_no_fact
from orchestrator.workspace.cloudview import CloudObject

OWNER = {"xce:cluster": "c1", "xce:provider": "sim"}


def builder(op_id: str) -> CloudObject:
    tags = {**OWNER, "xce:op_id": op_id, "xce:kind": "builder", "xce:template": "cpu"}
    return CloudObject(f"i-{op_id}", "b", "", tags, "running", "", "2026")


def baked(op_id: str, **over: str) -> BakedImage:
    tags = {**OWNER, "xce:op_id": op_id, "xce:kind": "image", "xce:template": "cpu", **over}
    return BakedImage(f"img-{op_id}", "n", "2026", "available", tags)


def intent(op_id: str) -> Fact:
    return Fact(FactKind.REQUEST_INTENT, "sim", op_id, Epoch(1, 1), template="cpu", count=1, detail="bake")


def test_builders_and_unkept_images_of_ops_not_in_flight_are_reported_only() -> None:
    index = FactIndex.of([intent("op-live")])  # op-live: intent, no instance yet (in flight)
    objects = [builder("op-old"), builder("op-live")]
    images = [baked("op-kept"), baked("op-lost"), baked("op-other", **{"xce:provider": "ec2"}), baked("op-live")]
    found = bake_leftovers("sim", "c1", index, objects, images, frozenset({"op-kept-image"}))
    assert [(f.cls, f.object_id, f.action) for f in found] == [
        (CLASS_E, "i-op-old", REPORT),
        (CLASS_E, "img-op-lost", REPORT),
    ]


def test_a_builder_without_a_fact_is_not_class_b() -> None:
    found, _in_flight = tagged_no_fact("sim", "c1", FactIndex.of([]), [], [builder("op-old")], "terminate")
    assert found == []
