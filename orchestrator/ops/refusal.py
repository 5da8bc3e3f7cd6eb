"""Where a create op meets Terraform, its failure becomes a typed error, once.

Terraform reports a cloud's refusal as an error diagnostic whose text carries the cloud's own
error code, however the provider wraps it. The provider module's entry in the registry
(``orchestrator/model/modules.py``) says which codes mean capacity, quota, permanent or
transient; here they are matched as words, capacity and quota first (an AWS capacity error
also says ``status code: 500``, which alone would read as transient), and the failure is raised
again as :class:`~orchestrator.errors.CapacityRefused`, ``QuotaRefused``, ``RequestRefused`` or
``CloudUnsettled`` with the same message. The reconcile loop and the fallback read the class,
never the text.

Each error diagnostic Terraform ties to a resource instance (``address``
``module.instances.xcesim_instance.this["<instance key>"]``) is also classified on its own: the
typed error's ``refused`` maps those instance keys to their class, so that a run where one
offering refused for capacity and another for quota says which key met which.

An error no rule names is **transient** (``matched`` empty): a retry with backoff is bounded
by ``policy.retry.attempts`` before the provider is passed over, whereas calling an unknown
error permanent would stop a template for good on a text never seen.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Sequence
from functools import cache

from orchestrator.clients.terraform.messages import ApplyFailed, Diagnostic
from orchestrator.errors import (
    CapacityRefused,
    CloudRefusal,
    CloudUnsettled,
    QuotaRefused,
    RequestRefused,
    TerraformError,
)
from orchestrator.model.modules import Classification, ErrorRule, FailureClass, error_rules

_TYPED: dict[FailureClass, type[CloudRefusal]] = {
    FailureClass.CAPACITY: CapacityRefused,
    FailureClass.QUOTA: QuotaRefused,
    FailureClass.PERMANENT: RequestRefused,
    FailureClass.TRANSIENT: CloudUnsettled,
}
_ORDER = list(FailureClass)


@cache
def _compiled(code: str) -> re.Pattern[str]:
    # A code is a word: "Unavailable" is not found in "FooUnavailableBar".
    return re.compile(rf"(?<![A-Za-z]){re.escape(code)}(?![a-z])", re.IGNORECASE)


def classify_text(text: str, rules: Sequence[ErrorRule] | None = None) -> Classification:
    """The class of one error text by ``rules`` (default: every module's), in class order."""
    rules = error_rules() if rules is None else rules
    for kind in _ORDER:
        for rule in rules:
            if rule.kind != kind:
                continue
            for code in rule.codes:
                if _compiled(code).search(text):
                    return Classification(kind, code, text)
    return Classification(FailureClass.TRANSIENT, "", text)


def classify(diagnostics: Sequence[Diagnostic], rules: Sequence[ErrorRule] | None = None) -> Classification:
    """The class of a failed run from its diagnostics: the first error by class order wins.

    Several error diagnostics (one per instance that failed) can disagree: one instance hit the
    quota while another timed out. The class order decides (capacity, quota, permanent,
    transient) because a capacity or quota refusal is what the fallback needs to know.
    """
    found = [classify_text(str(d), rules) for d in diagnostics if d.severity == "error"]
    if not found:
        return Classification(FailureClass.TRANSIENT, "", "no error diagnostic")
    # A matched rule beats an unmatched (default) transient of the same or lower rank.
    return min(found, key=lambda c: (_ORDER.index(c.kind) if c.matched else len(_ORDER), found.index(c)))


def refused_keys(diagnostics: Sequence[Diagnostic], rules: Sequence[ErrorRule] | None = None) -> dict[str, str]:
    """Instance key -> failure class value of every error diagnostic whose ``address`` names a
    resource instance by string key (``...["<key>"]``), each classified on its own; a key named
    by several takes the first class by class order (as ``classify`` does for the run)."""
    by_key: dict[str, list[Diagnostic]] = {}
    for d in diagnostics:
        key = _instance_key(d.address) if d.severity == "error" else None
        if key is not None:
            by_key.setdefault(key, []).append(d)
    return {key: classify(found, rules).kind.value for key, found in by_key.items()}


# The string key at the end of a resource instance address: ``...this["op-1-000"]``.
_KEYED = re.compile(r'\["((?:[^"\\]|\\.)*)"\]$')


def _instance_key(address: str | None) -> str | None:
    match = _KEYED.search(address or "")
    return None if match is None else match.group(1)


def refusal(module: str, exc: TerraformError) -> CloudRefusal:
    """``exc`` as the typed error module ``module``'s rules make of it (same message), with the
    instance keys its diagnostics named and their classes (``CloudRefusal.refused``)."""
    rules = error_rules(module)
    refused: dict[str, str] = {}
    if isinstance(exc, ApplyFailed) and exc.result.diagnostics:
        found = classify(exc.result.diagnostics, rules)
        refused = refused_keys(exc.result.diagnostics, rules)
    else:
        found = classify_text(str(exc), rules)
    return _TYPED[found.kind](exc.message, found.matched, found.text, refused)


@contextlib.contextmanager
def refusals(module: str) -> Iterator[None]:
    """Raise a plain Terraform failure inside as its typed :class:`CloudRefusal` (``refusal``).

    Only Terraform's own errors are classified: the errors with a meaning of their own (a lost
    lease, a stale plan, an unreachable registry, an unsafe plan) pass unchanged.
    """
    try:
        yield
    except (ApplyFailed, TerraformError) as exc:
        if type(exc) not in (ApplyFailed, TerraformError):
            raise
        raise refusal(module, exc) from exc
