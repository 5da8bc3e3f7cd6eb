"""Terraform diagnostics → capacity | quota | transient | permanent, on the texts clouds really send."""

from __future__ import annotations

import pytest

from orchestrator.clients.terraform.messages import Diagnostic, diagnostic
from orchestrator.model.modules import FailureClass, error_rules
from orchestrator.ops.refusal import classify, classify_text

CAPACITY, QUOTA, TRANSIENT, PERMANENT = (
    FailureClass.CAPACITY,
    FailureClass.QUOTA,
    FailureClass.TRANSIENT,
    FailureClass.PERMANENT,
)


def err(summary: str, detail: str = "") -> Diagnostic:
    return Diagnostic("error", summary, detail)


@pytest.mark.parametrize(
    ("summary", "detail", "expected", "code"),
    [
        # The simulated cloud (orchestrator/sim/cloud/store.py, provider.py _error).
        (
            "InsufficientCapacity: flavor c8 has no capacity (limit 5)",
            "while creating instance",
            CAPACITY,
            "InsufficientCapacity",
        ),
        (
            "InternalError: simulated API failure during create (error rate 0.3)",
            "while creating instance (retryable: the request may succeed if repeated with the same client_token)",
            TRANSIENT,
            "InternalError",
        ),
        (
            "RequestTimeout: simulated lost response to create (the instance may exist; repeat the request with "
            "the same client token)",
            "while creating instance",
            TRANSIENT,
            "RequestTimeout",
        ),
        (
            "RequestLimitExceeded: simulated cloud store busy (database is locked)",
            "while reading",
            TRANSIENT,
            "RequestLimitExceeded",
        ),
        (
            "AddressLimitExceeded: every address of 10.213.0.0/16 is in use",
            "while creating instance",
            QUOTA,
            "AddressLimitExceeded",
        ),
        (
            "IdempotentParameterMismatch: client token op-1-000 is in use with another flavor",
            "",
            PERMANENT,
            "IdempotentParameterMismatch",
        ),
        ("InvalidParameterValue: xce:max_lifetime 'x' is not whole seconds", "", PERMANENT, "InvalidParameterValue"),
        # AWS provider: capacity says "status code: 500" too, and must still read as capacity.
        (
            "creating EC2 Instance: InsufficientInstanceCapacity: We currently do not have sufficient m6i.xlarge "
            "capacity in the Availability Zone you requested (us-east-2a).",
            "status code: 500, request id: 889de2c1",
            CAPACITY,
            "InsufficientInstanceCapacity",
        ),
        (
            "creating EC2 Instance: VcpuLimitExceeded: You have requested more vCPU capacity than your current vCPU "
            "limit of 32 allows for the instance bucket that the specified instance type belongs to.",
            "",
            QUOTA,
            "VcpuLimitExceeded",
        ),
        (
            "creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 400, "
            "api error InstanceLimitExceeded: Your quota allows for 0 more running instance(s).",
            "",
            QUOTA,
            "InstanceLimitExceeded",
        ),
        (
            "creating EC2 Instance: operation error EC2: RunInstances, api error RequestLimitExceeded: Request limit "
            "exceeded.",
            "",
            TRANSIENT,
            "RequestLimitExceeded",
        ),
        (
            "creating EC2 Instance: InvalidAMIID.NotFound: The image id '[ami-0123]' does not exist",
            "",
            PERMANENT,
            "InvalidAMIID",
        ),
        (
            "creating EC2 Instance: UnauthorizedOperation: You are not authorized to perform this operation.",
            "",
            PERMANENT,
            "UnauthorizedOperation",
        ),
        # OpenStack (Nova through gophercloud): quota is a 403 and must not read as a permission error.
        (
            "Error creating OpenStack server: Request forbidden: [POST https://nova/v2.1/servers], error message: "
            '{"forbidden": {"code": 403, "message": "Quota exceeded for instances: Requested 1, but already used 10 '
            'of 10 instances"}}',
            "",
            QUOTA,
            "Quota exceeded",
        ),
        (
            "Error waiting for instance (0971371f) to become ready: unexpected state 'ERROR', wanted target 'ACTIVE'.",
            "No valid host was found. There are not enough hosts available.",
            CAPACITY,
            "No valid host was found",
        ),
        # Terraform itself.
        (
            "Unsupported argument",
            'An argument named "flavour" is not expected here.',
            PERMANENT,
            "Unsupported argument",
        ),
    ],
)
def test_real_texts(summary: str, detail: str, expected: FailureClass, code: str) -> None:
    found = classify([err(summary, detail)])
    assert (found.kind, found.matched) == (expected, code)
    assert summary.split(":")[0] in found.evidence()["text"]


def test_an_unknown_error_is_transient_and_says_no_rule_matched() -> None:
    found = classify_text("Error: something nobody has seen before")
    assert (found.kind, found.matched) == (TRANSIENT, "")


def test_codes_match_as_words_only() -> None:
    # "Unavailable" inside another word is not the transient code.
    assert classify_text("FooUnavailableBar happened").matched == ""
    assert classify_text("ServiceUnavailable: try later").kind == TRANSIENT


def test_capacity_wins_over_a_timeout_among_several_instances() -> None:
    diags = [
        err("creating EC2 Instance: RequestTimeout: timed out"),
        err("creating EC2 Instance: InsufficientInstanceCapacity: We currently do not have sufficient g5.4xlarge"),
        Diagnostic("warning", "Quota exceeded soon"),  # warnings never decide
    ]
    assert classify(diags).kind == CAPACITY


def test_from_terraform_json_diagnostic() -> None:
    # The shape Terraform's -json UI prints for a provider error (no source range).
    value = {
        "severity": "error",
        "summary": "InsufficientCapacity: flavor g4 has no capacity (limit 0)",
        "detail": "while creating instance",
    }
    assert classify([diagnostic(value)]).kind == CAPACITY
    assert classify([]).kind == TRANSIENT


@pytest.mark.parametrize(
    ("module", "text", "expected"),
    [
        ("xcesim", "InsufficientCapacity: flavor c8 has no capacity (limit 5)", CAPACITY),
        ("xcesim", "AddressLimitExceeded: every address of 10.213.0.0/16 is in use", QUOTA),
        ("aws", "creating EC2 Instance: InsufficientInstanceCapacity: ... status code: 500", CAPACITY),
        ("openstack", "Request forbidden: Quota exceeded for instances: Requested 1", QUOTA),
        ("openstack", "No valid host was found. There are not enough hosts available.", CAPACITY),
        # A code of another cloud is not this module's: transient, with no rule matched.
        ("openstack", "creating EC2 Instance: InsufficientInstanceCapacity: ...", TRANSIENT),
    ],
)
def test_each_module_reads_its_own_clouds_codes(module: str, text: str, expected: FailureClass) -> None:
    # The provider-module registry holds each module's rules (orchestrator/model/modules.py).
    assert classify_text(text, error_rules(module)).kind == expected
