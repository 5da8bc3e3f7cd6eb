"""``xceprov breaker reset TEMPLATE``: close a template's circuit breaker by hand, audited.

The breaker's state is the durable file ``<state_dir>/breakers.json`` (``reconcile/breaker.py``);
a running daemon reads it again at every pass, so a reset takes effect at its next pass. A
template the configuration does not name and no breaker was recorded for is refused in one line
naming it (a typo must not look like a successful reset).
"""

from __future__ import annotations

import time

from orchestrator.configfile import LoadedConfig
from orchestrator.errors import UsageError
from orchestrator.reconcile.breaker import Breakers, BreakerState
from orchestrator.workspace.audit import audit
from orchestrator.workspace.sharedstore import cluster_documents


def reset_breaker(loaded: LoadedConfig, template: str, now: float | None = None) -> BreakerState:
    """Close the breaker of ``template`` and forget its failures; the state it had before."""
    config = loaded.config
    breakers = Breakers.load(config.state_dir, config.policy.breaker, cluster_documents(config))
    recorded = {state.template for state in breakers.states()}
    if template not in config.templates and template not in recorded:
        known = ", ".join(sorted(config.templates)) or "none"
        raise UsageError(f"{loaded.source}: templates.{template}: no such template (known: {known}); nothing reset")
    when = time.time() if now is None else now
    before = breakers.state(template)
    breakers.reset(template)
    audit(config.state_dir, "breaker-reset", template=template, before=before.evidence(when, breakers.settings))
    return before
