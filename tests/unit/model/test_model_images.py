"""Baked images as data: the newest bake of a template, records older than today, the registry."""

from __future__ import annotations

import pytest

from orchestrator.errors import UsageError
from orchestrator.model.images import NONE, BakedImage, BuiltFrom, image_tags, newest_bake, stale_records
from orchestrator.ops.executor import bake_module

TODAY = BuiltFrom("debian-12", "1.1.0", "ab" * 32, "none")


def image(image_id: str, created: str, template: str = "cpu", **over: str) -> BakedImage:
    tags = image_tags("c1", "sim", f"op-{image_id}", "1.2", template, TODAY)
    return BakedImage(image_id, image_id, created, "available", {**tags, **over})


def test_the_newest_bake_is_the_templates_own_of_this_cluster_and_provider() -> None:
    older = image("img-1", "2026-01-01T00:00:00Z")
    newer = image("img-2", "2026-02-01T00:00:00Z")
    other_template = image("img-3", "2026-03-01T00:00:00Z", template="gpu")
    other_cluster = image("img-4", "2026-04-01T00:00:00Z", **{"xce:cluster": "c2"})
    not_a_bake = image("img-5", "2026-05-01T00:00:00Z", **{"xce:kind": "builder"})
    found = newest_bake([newer, older, other_template, other_cluster, not_a_bake], "c1", "sim", "cpu")
    assert found is newer
    assert newest_bake([other_template], "c1", "sim", "cpu") is None


def test_records_that_differ_from_today_are_named_and_unknowns_are_not_compared() -> None:
    current = image("img-1", "t")
    assert stale_records(current, TODAY) == {}
    old = image("img-1", "t", **{"xce:role-version": "1.0.0"})
    assert stale_records(old, TODAY) == {"xce:role-version": ("1.0.0", "1.1.0")}
    # Today's base image and archive unknown: neither is compared.
    unknown = BuiltFrom("", "1.1.0", NONE, "none")
    moved = image("img-1", "t", **{"xce:built-from-image": "debian-11", "xce:node-manager-sha256": "cd" * 32})
    assert stale_records(moved, unknown) == {}
    assert set(stale_records(moved, TODAY)) == {"xce:built-from-image", "xce:node-manager-sha256"}


def test_an_image_carries_the_owner_tags_its_kind_and_every_record() -> None:
    tags = image_tags("c1", "sim", "op-1", "1.2", "cpu", BuiltFrom("debian-12", "", "x", "y"))
    assert tags["xce:kind"] == "image" and tags["xce:template"] == "cpu" and tags["xce:epoch"] == "1.2"
    assert tags["xce:role-version"] == NONE  # an empty record is "none": clouds drop empty tags


def test_a_module_without_images_is_refused_in_one_line_saying_what_to_do() -> None:
    assert bake_module("xcesim", "sim").image_types == ("xcesim_image",)
    assert bake_module("aws", "ec2").image_types == ("aws_ami_from_instance",)
    with pytest.raises(UsageError) as refused:
        bake_module("openstack", "os")
    line = str(refused.value)
    assert "\n" not in line and line.startswith("provider os: module openstack cannot bake images")
    assert "snapshot a builder server yourself" in line
