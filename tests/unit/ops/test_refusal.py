"""One provider-module registry, and a create's failure typed where the op meets Terraform (issue 29, items 2, 5).

What a contributor and an operator would notice: a module registered with its own instance
resource has that resource's drift read as a host's; its own error rules decide whether a
failure is capacity, quota, permanent or transient; the reconcile loop goes by the error's
class and never by its text; a module with directories but no entry is refused in one line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from tffake import ROOT, FakeEngine, unit_executor

from orchestrator.clients.terraform.messages import (
    ApplyFailed,
    ApplyResult,
    Diagnostic,
    PlanResult,
    ResourceChange,
    Summary,
)
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import (
    CapacityRefused,
    CloudUnsettled,
    ConfigError,
    QuotaRefused,
    RegistryUnreachable,
    TerraformError,
)
from orchestrator.model.modules import MODULES, TERRAFORM_RULES, ErrorRule, FailureClass, ProviderModule
from orchestrator.model.tags import TOOLKIT_TAGS
from orchestrator.ops.refusal import refusal, refusals
from orchestrator.reconcile.classify import classify_error
from orchestrator.workspace.cloudview import drift_from_plan, drift_from_stream
from orchestrator.workspace.workdir import ProviderWorkdir

# A cloud the toolkit has never seen: its own instance resource and its own capacity code.
THROWAWAY = ProviderModule(
    name="throwaway",
    instance_types=("throwaway_machine",),
    error_rules=(ErrorRule(FailureClass.CAPACITY, ("NoRoomAtTheInn",)), *TERRAFORM_RULES),
)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> ProviderModule:
    monkeypatch.setitem(MODULES, THROWAWAY.name, THROWAWAY)
    return THROWAWAY


def deleted_in_plan(rtype: str) -> dict[str, object]:
    entry = {
        "address": f'module.instances.{rtype}.this["op1-0"]',
        "mode": "managed",
        "type": rtype,
        "name": "this",
        "index": "op1-0",
        "change": {"actions": ["delete"], "before": {"id": "m-1"}, "after": None},
    }
    return {"resource_drift": [entry]}


def deleted_in_stream(rtype: str) -> PlanResult:
    change = ResourceChange(
        f'module.instances.{rtype}.this["op1-0"]', "module.instances", rtype, "this", "op1-0", "delete"
    )
    return PlanResult(changes=(), drift=(change,), diagnostics=(), summary=Summary(), has_changes=True)


def test_a_registered_modules_instance_drift_is_a_hosts(registered: ProviderModule) -> None:
    assert drift_from_plan(deleted_in_plan("throwaway_machine")).deleted == {"op1-0": "m-1"}
    assert drift_from_stream(deleted_in_stream("throwaway_machine"), lambda: {"op1-0": "m-1"}).deleted == {
        "op1-0": "m-1"
    }
    assert registered.instance_address("op1-0") == 'module.instances.throwaway_machine.this["op1-0"]'


def test_an_unregistered_resource_says_nothing_about_hosts() -> None:
    assert drift_from_plan(deleted_in_plan("throwaway_machine")).deleted == {}
    assert drift_from_stream(deleted_in_stream("throwaway_machine"), dict).deleted == {}


def test_the_modules_own_rules_type_its_failure(registered: ProviderModule) -> None:
    text = "Error: creating machine: NoRoomAtTheInn: no machine of size m8 left"
    typed = refusal("throwaway", TerraformError(text))
    assert isinstance(typed, CapacityRefused) and typed.matched == "NoRoomAtTheInn"
    # Still Terraform's error to a user: the same line, the same exit code.
    assert (str(typed), typed.exit_code) == (text, 4)
    # Another module's rules do not know the code: transient, retried in place.
    assert isinstance(refusal("xcesim", TerraformError(text)), CloudUnsettled)


def test_an_applys_diagnostics_decide_capacity_before_a_timeout() -> None:
    diags = (
        Diagnostic("error", "creating EC2 Instance: RequestTimeout: timed out"),
        Diagnostic("error", "creating EC2 Instance: VcpuLimitExceeded: You have requested more vCPU"),
    )
    failed = ApplyFailed("two errors", ApplyResult((), (), diags, Summary()))
    assert isinstance(refusal("aws", failed), QuotaRefused)


def test_errors_with_a_meaning_of_their_own_pass_the_boundary_unchanged() -> None:
    unreachable = RegistryUnreachable("registry unreachable (i/o timeout)")
    with pytest.raises(RegistryUnreachable), refusals("xcesim"):
        raise unreachable


def test_the_loop_reads_the_class_never_the_text() -> None:
    text = "InsufficientCapacity: flavor c8.large has no capacity (limit 0)"
    # Untyped, a capacity text is not capacity to the loop: only the boundary reads text.
    assert classify_error(TerraformError(text)).kind == FailureClass.TRANSIENT
    found = classify_error(CapacityRefused(text, "InsufficientCapacity"))
    assert found.evidence() == {"class": "capacity", "matched": "InsufficientCapacity", "text": text}


def test_a_create_leaves_as_its_typed_refusal(
    loaded: LoadedConfig, engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The injected failure's text, read as capacity by the module's (patched) rules.
    rules = (ErrorRule(FailureClass.CAPACITY, ("the cloud refused",)),)
    monkeypatch.setitem(MODULES, "xcesim", dataclasses.replace(MODULES["xcesim"], error_rules=rules))
    executor = unit_executor(loaded, engine)
    engine.fail_apply.add(ProviderWorkdir(loaded.config, "sim", ROOT).path)
    with pytest.raises(CapacityRefused, match=r"the cloud refused \(injected\)"):
        executor.create("sim", "cpu", 1)


def test_a_module_without_a_registry_entry_is_refused_in_one_line(
    loaded: LoadedConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(MODULES, "xcesim")
    with pytest.raises(ConfigError) as caught:
        ProviderWorkdir(loaded.config, "sim", ROOT)
    assert str(caught.value) == (
        "providers.sim.module: 'xcesim' has no entry in the provider-module registry "
        '(orchestrator/model/modules.py; CONTRIBUTING.md, "Adding a provider module")'
    )


def test_a_cloud_whose_labels_refuse_the_owner_tags_is_refused_in_one_line(
    loaded: LoadedConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Labels of lower-case letters, digits, "_" and "-" only (no ":"), as some clouds have.
    narrow = dataclasses.replace(MODULES["xcesim"], tag_chars="[a-z0-9_-]")
    monkeypatch.setitem(MODULES, "xcesim", narrow)
    with pytest.raises(ConfigError) as caught:
        ProviderWorkdir(loaded.config, "sim", ROOT)
    assert (
        str(caught.value)
        == "providers.sim.module: module xcesim: tag key 'xce:cluster' has characters outside [a-z0-9_-]"
    )
    # Mapping one key is not enough: every toolkit tag's label key must fit.
    one = dataclasses.replace(narrow, tag_keys={"xce:cluster": "xce-cluster"})
    monkeypatch.setitem(MODULES, "xcesim", one)
    with pytest.raises(ConfigError, match=r"^providers.sim.module: module xcesim: tag key 'xce:provider' has"):
        ProviderWorkdir(loaded.config, "sim", ROOT)
    # Every key mapped: the provider is taken, its common tags handed to Terraform as labels.
    keys = {key: key.replace(":", "_") for key in TOOLKIT_TAGS}
    monkeypatch.setitem(MODULES, "xcesim", dataclasses.replace(narrow, tag_keys=keys, tag_escape="_"))
    workdir = ProviderWorkdir(loaded.config, "sim", ROOT)
    assert workdir.variables({}, {})["common_tags"] == {"xce_cluster": loaded.config.cluster, "xce_provider": "sim"}
