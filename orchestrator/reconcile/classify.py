"""What a failed create tells the policy: capacity, quota, transient or permanent, by type.

The failure was classified once, where the op met Terraform (:mod:`orchestrator.ops.refusal`,
by the provider module's error rules in :mod:`orchestrator.model.modules`): it arrives here as
a :class:`~orchestrator.errors.CloudRefusal` whose class says what happened. The loop and the
fallback read that class and never the error's text.

* **capacity**: the memory of refusals (:mod:`.refusals`) holds the refused offering; the
  provider's other offerings and the next provider by priority are asked; it is probed again
  after ``policy.capacity_backoff``;
* **quota**: the memory holds every offering of that provider, by ``policy.quota_backoff``
  (longer), or until one of its instances goes;
* **transient**: the same op is retried on the same provider after a backoff;
* **permanent**: the template falls back and the provider is not asked again for it until the
  configuration is reloaded.

Any other error (a controller, a facts file, a bug) is **transient** with ``matched`` empty in
the evidence: a retry with backoff is bounded by ``policy.retry.attempts`` before the provider
is passed over.
"""

from __future__ import annotations

from orchestrator.errors import CloudRefusal
from orchestrator.model.modules import Classification, FailureClass

__all__ = ["Classification", "FailureClass", "classify_error"]


def classify_error(exc: BaseException) -> Classification:
    """The class of a failed create, from the type of its error alone."""
    if isinstance(exc, CloudRefusal):
        return Classification(FailureClass(exc.failure), exc.matched, exc.text)
    return Classification(FailureClass.TRANSIENT, "", str(exc))
