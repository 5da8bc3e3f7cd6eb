"""Which instance keys a refused create names, and each one's class (issue 31, BRIEF decision 5).

Terraform ties an apply's error diagnostic to the resource instance it is about (JSON
``address``: ``module.instances.xcesim_instance.this["<key>"]``, checked against a real apply in
tests/integration/test_sim_offers.py); ``CloudRefusal.refused`` maps those keys to their class,
while the op's own class keeps the class order rule.
"""

from __future__ import annotations

from orchestrator.clients.terraform.messages import ApplyFailed, ApplyResult, Diagnostic, Summary
from orchestrator.errors import CapacityRefused, CloudUnsettled, QuotaRefused, TerraformError
from orchestrator.ops.refusal import refusal

ADDRESS = 'module.instances.xcesim_instance.this["{}"]'


def _failed(*diags: Diagnostic) -> ApplyFailed:
    return ApplyFailed("apply failed", ApplyResult((), (), diags, Summary()))


def _error(summary: str, key: str | None) -> Diagnostic:
    return Diagnostic("error", summary, "while creating instance", address=None if key is None else ADDRESS.format(key))


def test_each_named_key_gets_its_own_class_and_the_op_keeps_the_class_order() -> None:
    failed = _failed(
        _error("InternalError: simulated API failure during create (error rate 1)", "op-1-000"),
        _error("InstanceLimitExceeded: the account may run at most 2 instances (2 live)", "op-1-001"),
        _error("InsufficientCapacity: flavor c8 in zone b has no capacity (limit 0)", "op-1-002"),
    )
    typed = refusal("xcesim", failed)
    # Capacity before quota before transient: the op is a capacity refusal.
    assert isinstance(typed, CapacityRefused) and typed.matched == "InsufficientCapacity"
    assert dict(typed.refused) == {"op-1-000": "transient", "op-1-001": "quota", "op-1-002": "capacity"}


def test_the_simulated_clouds_quota_code_is_a_quota_refusal() -> None:
    typed = refusal("xcesim", _failed(_error("InstanceLimitExceeded: the account may run at most 0 instances", "k-0")))
    assert isinstance(typed, QuotaRefused) and typed.matched == "InstanceLimitExceeded"
    assert dict(typed.refused) == {"k-0": "quota"}


def test_a_key_named_twice_takes_the_first_class_by_order() -> None:
    failed = _failed(
        _error("RequestTimeout: timed out", "op-2-000"),
        _error("InsufficientCapacity: flavor c8 has no capacity (limit 0)", "op-2-000"),
    )
    assert dict(refusal("xcesim", failed).refused) == {"op-2-000": "capacity"}


def test_nothing_named_is_an_empty_map() -> None:
    # A diagnostic about no resource (a provider configuration error), a warning about one, and
    # a resource without a string key: none names an instance key.
    failed = _failed(
        _error("InsufficientCapacity: flavor c8 has no capacity (limit 0)", None),
        Diagnostic("warning", "deprecated", address=ADDRESS.format("op-3-000")),
        Diagnostic("error", "InternalError: boom", address="module.instances.xcesim_instance.this[0]"),
    )
    typed = refusal("xcesim", failed)
    assert isinstance(typed, CapacityRefused) and dict(typed.refused) == {}
    # A failure that is no apply's names none either.
    plain = refusal("xcesim", TerraformError("InternalError: boom"))
    assert isinstance(plain, CloudUnsettled) and dict(plain.refused) == {}
