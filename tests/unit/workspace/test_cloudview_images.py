"""The tagged image listing read from a refresh-only plan's outputs (untrusted, checked)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.errors import TerraformError
from orchestrator.model.labels import AS_IS, LabelMap
from orchestrator.model.tags import TOOLKIT_TAGS
from orchestrator.workspace.cloudview import listing_from_plan


def document(images: Any, supported: bool = True) -> dict[str, Any]:
    outputs = {"tagged_supported": {"value": supported}, "tagged": {"value": {}}}
    if images is not None:
        outputs["tagged_images"] = {"value": images}
    return {"planned_values": {"outputs": outputs}}


IMG = {"id": "img-1", "name": "n", "instance_id": "i-1", "created_at": "2026", "state": "available", "tags": {"a": "b"}}


def test_images_are_listed_oldest_first_even_where_instances_cannot_be() -> None:
    newer = {**IMG, "id": "img-2", "created_at": "2027"}
    listing = listing_from_plan(document({"img-2": newer, "img-1": IMG}), AS_IS)
    assert [i.id for i in listing.images] == ["img-1", "img-2"]
    assert listing.images[0].tags == {"a": "b"} and listing.images[0].created == "2026"
    assert [i.id for i in listing_from_plan(document({"img-1": IMG}, supported=False), AS_IS).images] == ["img-1"]
    assert listing_from_plan(document(None), AS_IS).images == []  # a root without the output lists none


@pytest.mark.parametrize(
    "bad",
    [{"img-9": IMG}, {"img-1": {**IMG, "tags": ["x"]}}, {"img-1": "text"}, {"img-1": {**IMG, "name": 5}}],
)
def test_a_malformed_image_listing_is_an_unread_view(bad: Any) -> None:
    with pytest.raises(TerraformError, match="tagged_images"):
        listing_from_plan(document(bad), AS_IS)


def test_a_mapped_module_s_image_labels_are_read_back_as_the_toolkit_s_tags() -> None:
    labels = LabelMap(
        "gce", {t: t.replace("xce:", "xce_").replace("-", "_") for t in TOOLKIT_TAGS}, "[a-z0-9_-]", "_", 63
    )
    written = labels.to_labels({"xce:cluster": "demo", "xce:kind": "image", "xce:epoch": "3.17", "xce:template": "cpu"})
    assert "xce:kind" not in written and written["xce_kind"] == "image"
    listing = listing_from_plan(document({"img-1": {**IMG, "tags": written}}), labels)
    assert listing.images[0].tags == {
        "xce:cluster": "demo",
        "xce:kind": "image",
        "xce:epoch": "3.17",
        "xce:template": "cpu",
    }
    assert listing.images[0].template == "cpu"
