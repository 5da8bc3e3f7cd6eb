"""What a failed create tells the policy: capacity, quota, transient or permanent.

Terraform reports a cloud's refusal as an error diagnostic whose text carries the cloud's own
error code, however the provider wraps it (``creating EC2 Instance: InsufficientInstanceCapacity:
We currently do not have sufficient m5.large capacity ...``, ``... api error
VcpuLimitExceeded: ...``, Nova's ``Quota exceeded for instances: Requested 1, but already used
10 of 10 instances``, the simulated cloud's ``InsufficientCapacity: flavor c8 has no capacity
(limit 5)``). The codes are matched as words, capacity and quota before anything else: an AWS
capacity error also says ``status code: 500``, which alone would read as transient.

* **capacity**: the cloud has no room for this flavor now (the template falls back to the
  next provider by priority; the provider is tried again after a backoff);
* **quota**: the account's limit is reached (every template on that provider falls back; a
  quota rarely clears by itself, so the backoff grows to its maximum quickly);
* **transient**: throttling, timeouts, internal errors (the same op is retried on the same
  provider after a backoff);
* **permanent**: the request itself is wrong (bad parameter, image, permission, Terraform
  configuration): retrying cannot help, the template falls back and the provider is not asked
  again for it until the configuration is reloaded.

An error no rule names is **transient**, with ``matched`` empty in the evidence: a retry with
backoff is bounded by ``policy.retry.attempts`` before the provider is passed over, whereas
calling an unknown error permanent would stop a template for good on a text we never saw.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.clients.terraform.messages import ApplyFailed, Diagnostic


class FailureClass(StrEnum):
    """What kind of failure a create met; the order of severity is that of the rules below."""

    CAPACITY = "capacity"
    QUOTA = "quota"
    PERMANENT = "permanent"
    TRANSIENT = "transient"


# Error codes and phrases (case-insensitive, matched as words) → class, checked in this order.
_RULES: tuple[tuple[FailureClass, tuple[str, ...]], ...] = (
    (
        FailureClass.CAPACITY,
        (
            "InsufficientInstanceCapacity",  # EC2 RunInstances: no capacity of the type in the AZ
            "InsufficientHostCapacity",  # EC2 dedicated hosts
            "InsufficientReservedInstanceCapacity",
            "InsufficientCapacity",  # EC2 Fleet/Spot, and the simulated cloud's capacity fault
            "InsufficientFreeAddressesInSubnet",
            "No valid host was found",  # Nova scheduler (NoValidHost)
            "NoValidHost",
            "not enough hosts available",
        ),
    ),
    (
        FailureClass.QUOTA,
        (
            "InstanceLimitExceeded",  # EC2: running instances of the account
            "VcpuLimitExceeded",  # EC2: vCPU limit of the instance bucket
            "MaxSpotInstanceCountExceeded",
            "AddressLimitExceeded",  # EC2 addresses, and the simulated cloud's full network
            "Quota exceeded",  # Nova/Neutron/Cinder: "Quota exceeded for instances: ..."
            "QuotaExceeded",
            "OverQuota",
            "exceeding quota limits",
            "requested more instances",  # EC2: "You have requested more instances (1) than your current instance limit"
        ),
    ),
    (
        FailureClass.PERMANENT,
        (
            "InvalidParameterValue",
            "InvalidParameterCombination",
            "InvalidParameter",
            "InvalidAMIID",
            "InvalidInstanceID",
            "InvalidKeyPair",
            "InvalidSubnetID",
            "InvalidGroup",
            "IdempotentParameterMismatch",
            "UnauthorizedOperation",
            "AuthFailure",
            "OptInRequired",
            "Unsupported argument",  # Terraform configuration errors
            "Unsupported",  # EC2: the instance type is not supported in this zone
            "Invalid value for variable",
            "Unable to find image",
            "Unable to find flavor",
            "Bad request with",
            "Forbidden",
        ),
    ),
    (
        FailureClass.TRANSIENT,
        (
            "RequestLimitExceeded",  # EC2 throttling, and the simulated cloud's busy store
            "Throttling",
            "ThrottlingException",
            "RequestTimeout",
            "ServiceUnavailable",
            "Unavailable",
            "InternalError",
            "InternalFailure",
            "timeout while waiting",
            "i/o timeout",
            "connection reset",
            "connection refused",
            "TLS handshake timeout",
            "Service Unavailable",
            "retryable",
        ),
    ),
)

_COMPILED = tuple(
    (kind, tuple((code, re.compile(rf"(?<![A-Za-z]){re.escape(code)}(?![a-z])", re.IGNORECASE)) for code in codes))
    for kind, codes in _RULES
)


@dataclass(frozen=True)
class Classification:
    """The class of a failure, the code that decided it and the text it was found in."""

    kind: FailureClass
    matched: str
    text: str

    def evidence(self) -> dict[str, Any]:
        """JSON-ready: class, matched code ("" = no rule matched) and the diagnostic text."""
        return {"class": self.kind.value, "matched": self.matched, "text": self.text}


def classify_text(text: str) -> Classification:
    """The class of one error text (a diagnostic's summary and detail, or an error message)."""
    for kind, patterns in _COMPILED:
        for code, pattern in patterns:
            if pattern.search(text):
                return Classification(kind, code, text)
    return Classification(FailureClass.TRANSIENT, "", text)


def classify(diagnostics: Sequence[Diagnostic]) -> Classification:
    """The class of a failed apply from its diagnostics: the first error by rule order wins.

    Several error diagnostics (one per instance that failed) can disagree: one instance hit the
    quota while another timed out. The rule order decides (capacity, quota, permanent,
    transient) because a capacity or quota refusal is what the fallback needs to know.
    """
    found = [classify_text(str(d)) for d in diagnostics if d.severity == "error"]
    if not found:
        return Classification(FailureClass.TRANSIENT, "", "no error diagnostic")
    order = [kind for kind, _ in _RULES]
    # A matched rule beats an unmatched (default) transient of the same or lower rank.
    return min(found, key=lambda c: (order.index(c.kind) if c.matched else len(order), found.index(c)))


def classify_error(exc: BaseException) -> Classification:
    """The class of a failed create: an apply's own diagnostics when it has them, else its text."""
    if isinstance(exc, ApplyFailed) and exc.result.diagnostics:
        return classify(exc.result.diagnostics)
    return classify_text(str(exc))
