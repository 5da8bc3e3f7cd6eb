"""Every error a user can see, in one place.

A user sees ``str(error)`` on one line and the process exits with ``error.exit_code``; a
traceback is printed only with ``-v``. Retryable errors (a flaky cloud API, a controller that
went away mid-request) are split from final ones so that loops know whether to try again.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType


class XceprovError(Exception):
    """Root of the errors the toolkit raises on purpose; carries a one-line message and an exit code."""

    exit_code: int = 1

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class UsageError(XceprovError):
    """The command line asks for something impossible (unknown template, count <= 0, ...)."""

    exit_code = 2


class ConfigError(XceprovError):
    """The site configuration or a host template is invalid; ``problems`` holds one line each."""

    exit_code = 3

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class RetryableError(XceprovError):
    """Something outside failed in a way that may succeed later; ``delay`` is a hint in seconds."""

    exit_code = 75  # EX_TEMPFAIL

    def __init__(self, message: str, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class FinalError(XceprovError):
    """Something outside failed in a way that retrying will not fix."""


class TerraformError(FinalError):
    """Terraform reported error diagnostics; ``message`` is Terraform's own text with file and line."""

    exit_code = 4


class RegistryUnreachable(TerraformError):
    """``terraform init`` could not reach a provider registry (or the network mirror).

    Exit 75 like every outside service that may answer later, the same in ``validate`` and in
    every verb that runs Terraform; still a ``TerraformError``, so the loops handle it as before.
    """

    exit_code = 75


class CloudRefusal(TerraformError):
    """A create's Terraform run failed, classified once where the op meets Terraform by the
    provider module's error rules (``orchestrator/model/modules.py``): the class says what the
    reconcile loop does next, so no loop reads the text. Still a ``TerraformError`` (exit 4, the
    same message): only the class is new. ``matched`` is the rule's code ("" when none matched).
    ``refused``: instance key -> failure class value (``capacity``, ``quota``...) of each key
    the run's diagnostics named, each classified on its own; empty when the run named none
    (then every uncreated key of the op counts as refused with the op's class).
    """

    failure = "transient"

    def __init__(
        self, message: str, matched: str = "", text: str = "", refused: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.matched = matched
        self.text = text or message
        self.refused: Mapping[str, str] = MappingProxyType(dict(refused or {}))


class CapacityRefused(CloudRefusal):
    """The cloud has no room for the flavor now: the template falls back to the next provider."""

    failure = "capacity"


class QuotaRefused(CloudRefusal):
    """The account's limit is reached: every template on the provider falls back."""

    failure = "quota"


class RequestRefused(CloudRefusal):
    """The request itself is wrong (parameter, image, permission, configuration): never retried as is."""

    failure = "permanent"


class CloudUnsettled(CloudRefusal):
    """Throttling, a timeout, an internal error, or a text no rule names: retried in place after a backoff."""

    failure = "transient"


class AnsibleError(FinalError):
    """An Ansible run could not start or failed as a whole (per-host failures are results, not errors)."""

    exit_code = 5


class ControllerError(RetryableError):
    """The controller link failed; the request may be retried after reconnecting."""


class StoreUnavailable(RetryableError):
    """The shared store (PostgreSQL, ``terraform.backend: pg``) cannot be reached or failed a call;
    nothing was changed by that call. The message never holds the connection string."""


class ControllerMisbehaved(ControllerError):
    """The controller broke a rule of the protocol (a ``queryFacts`` page that does not advance
    ``afterFactId``, more pages or facts than one read may take): that read failed; it is
    retried with backoff (docs/protocol.md, "Limits")."""


class LeaseLost(XceprovError):
    """The lease for a provider is not valid; no mutation may start."""

    exit_code = 6


class StoreLost(LeaseLost):
    """The fence closed during an apply because the shared store stopped answering: Terraform
    stopped and kept the state it could not write (``errored.tfstate``). A lost fence to every
    loop (the op stays open), the store's outage to the user: exit 75, retry later."""

    exit_code = 75


class StaleState(FinalError):
    """A saved plan no longer matches the state it was made against."""

    exit_code = 7


class LeaseHeld(XceprovError):
    """Another orchestrator instance holds the provider's lease; ``retry_after`` is the controller's hint."""

    exit_code = 9

    def __init__(self, message: str, holder: str = "", retry_after: float = 0.0) -> None:
        super().__init__(message)
        self.holder = holder
        self.retry_after = retry_after


class UnsafePlan(FinalError):
    """A plan would change more than the op asked for (a delete, a replacement, another key); not applied."""

    exit_code = 8


class HostBusy(XceprovError):
    """A host runs work: it is not returned without draining first (or ``--force``)."""

    exit_code = 10


class ScanIncomplete(XceprovError):
    """An orphan scan could not read every view: what it found is printed, but it is no all-clear."""

    exit_code = 11


class ContractRefused(XceprovError):
    """A provider-contract document is malformed or names what does not exist (``xceprov provider``):
    answered with a JSON error, nothing changed. ``kind`` is the error document's ``type``."""

    exit_code = 1

    def __init__(self, message: str, kind: str = "bad_input") -> None:
        super().__init__(message)
        self.kind = kind
