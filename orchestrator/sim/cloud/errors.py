"""The simulated cloud API's errors: retryable (an injected fault) or final (the call is refused)."""

from __future__ import annotations

from orchestrator.errors import FinalError, RetryableError


class CloudError(FinalError):
    """A simulated cloud API call failed in a way retrying will not fix."""


class CloudApiError(RetryableError):
    """An injected, retryable API failure (the simulated ``InternalError``/throttling)."""


class InsufficientCapacity(CloudError):
    """A flavor's capacity limit is reached (in a zone or in all); the message names both."""


class InstanceLimitExceeded(CloudError):
    """The account's quota of live instances is reached (EC2's code, classified as quota)."""


class IdempotentParameterMismatch(CloudError):
    """A create reused a live instance's client token with different name, flavor or image."""


class InstanceNotFound(CloudError):
    """No instance has this id."""


class ImageNotFound(CloudError):
    """No available image has this id."""


class AddressSpaceExhausted(CloudError):
    """Every address of the cloud's network is held by a live instance."""


class InvalidParameterValue(CloudError):
    """A create or tag update carried a value the cloud refuses (a malformed ``xce:max_lifetime``)."""
