"""The check between plan and apply for images: exactly the image asked, nothing else."""

from __future__ import annotations

import pytest

from orchestrator.clients.terraform.messages import Action, PlanResult, ResourceChange, Summary
from orchestrator.errors import UnsafePlan
from orchestrator.ops.plancheck import check_images


def plan(*changes: tuple[str, str, Action]) -> PlanResult:
    return PlanResult(
        changes=tuple(ResourceChange(f'm.{t}.this["{k}"]', "m", t, "this", k, a) for t, k, a in changes),
        drift=(),
        diagnostics=(),
        summary=Summary(),
        has_changes=bool(changes),
    )


def test_an_image_plan_passes_only_when_it_does_exactly_what_was_asked() -> None:
    check_images(plan(("xcesim_image", "op-1-image", "create")), "bake", create={"op-1-image"})
    check_images(plan(("aws_ami_from_instance", "op-1-image", "delete")), "delete", delete={"op-1-image"})
    check_images(plan(), "bake", create={"op-1-image"})  # made already: nothing to do
    with pytest.raises(UnsafePlan, match="would also delete op-2-image"):
        check_images(
            plan(("xcesim_image", "op-1-image", "create"), ("xcesim_image", "op-2-image", "delete")),
            "bake",
            create={"op-1-image"},
        )
    with pytest.raises(UnsafePlan, match="would also create op-1-000"):
        check_images(plan(("xcesim_instance", "op-1-000", "create")), "bake", create={"op-1-000"})
    with pytest.raises(UnsafePlan, match="would also update op-1-image"):
        check_images(plan(("xcesim_image", "op-1-image", "update")), "bake", create={"op-1-image"})
