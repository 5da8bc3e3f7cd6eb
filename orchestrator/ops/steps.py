"""The steps of an op that change nothing: render, variables, candidate variables file, plan.

One copy for the two callers that plan a desired set: the executor's ops (each step under the
fence, with the op's intent and facts around it, :mod:`orchestrator.ops.executor`) and the plan
preview (``xceprov plan``, ``orchestrator.services.plan``), which runs the very same steps and
simply invokes none of the fencing: no gate, no fact, no desired set written. What a preview
shows is then what the op plans for the same request, by construction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.engine import Engine
from orchestrator.clients.terraform.messages import PlanResult
from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.images import ImageSpec
from orchestrator.model.instances import InstanceSpec
from orchestrator.render.instances import RenderRequest, controller_context, render_op, render_settings, renderer_for
from orchestrator.workspace.workdir import ProviderWorkdir

# The root variable every provider root declares for the plan's epoch (docs/provider-modules.md);
# its default, "", is what a plan outside the fence (a preview) hands the provider.
FENCE_VARIABLE = "fence"


def render_instances(
    config: Config, root: Path, request: RenderRequest, *, source: str = "", allow_missing_ca: bool = False
) -> dict[str, InstanceSpec]:
    """The instances of one op, rendered from the site's template directories, then the toolkit's.

    ``source`` names the configuration file in a refusal; ``allow_missing_ca``: a preview renders
    without a CA file that does not exist yet (the apply renders again, and needs it).
    """
    template = config.templates.get(request.template)
    if template is None or request.provider not in template.providers:
        raise UsageError(f"template {request.template!r} cannot run on provider {request.provider!r}")
    renderer = renderer_for(config, root / "templates", source)
    return render_op(config, renderer, request, controller_context(config, allow_missing_ca=allow_missing_ca))


def desired_variables(
    config: Config,
    workdir: ProviderWorkdir,
    instances: Mapping[str, InstanceSpec],
    images: Mapping[str, ImageSpec] | None = None,
) -> dict[str, Any]:
    """The whole Terraform variables document of ``instances`` as the shard's desired set
    (``images``: its baked images; None keeps the current ones, :meth:`ProviderWorkdir.variables`)."""
    return workdir.variables(instances, render_settings(config, workdir.provider), images)


@dataclass(frozen=True)
class PlanOf:
    """A plan of a desired set: Terraform's answer and the variables it was made from (without
    ``fence``, which is not part of the desired set)."""

    result: PlanResult
    variables: dict[str, Any]


def plan_desired(
    config: Config,
    engine: Engine,
    workdir: ProviderWorkdir,
    instances: Mapping[str, InstanceSpec],
    *,
    out: Path | None = None,
    fence: str = "",
    scratch: Path | None = None,
    images: Mapping[str, ImageSpec] | None = None,
    ephemeral: Sequence[Path] = (),
) -> PlanOf:
    """Plan ``instances`` as the whole desired set of ``workdir`` (its lock held by the caller).

    The variables go to a private candidate file (in ``scratch`` when given, else the working
    directory), never to the desired set: writing it is the op's step, after its plan is checked.
    ``out``: where Terraform saves the plan. ``fence``: the epoch tag the plan hands the provider
    configuration (an op's, :meth:`TerraformSteps.plan_fence`; "" for a preview). ``images``:
    the baked images planned (None: the current ones, unchanged). ``ephemeral``:
    files of the root's ephemeral variables (an op's join tokens, ``ops.firstboot``; none for a
    preview), which the apply of the saved plan must be given again.
    """
    variables = desired_variables(config, workdir, instances, images)
    with workdir.candidate_var_file({**variables, FENCE_VARIABLE: fence}, scratch) as var_file:
        result = engine.plan(workdir.path, var_files=[var_file, *ephemeral], out=out)
    return PlanOf(result, variables)
