"""The scale-out phase in rounds: warm pool first, then policy → creates until nothing is refused.

Every round decides as of the phase's start (``now``): a provider that refused in round one is
still passed over in round two even when closing the refused op outlasted its backoff. A
create refused and closed (capacity, quota, permanent: the loop's ``create`` says so) makes the
next round at once fall back: the offerings it was placed on are refused for this phase
(``PolicyInputs.refused_now``: the rest goes to the next offering of the same provider, then to
the next provider) and its template is not held by the cooldown (``fallback``). Each refusal
excludes at least one offering or provider, so the rounds end. Pool refills and surplus returns
come after the creates of the burst (:mod:`.poolphase`).
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, replace
from pathlib import Path

from orchestrator.model.config import Config
from orchestrator.reconcile.gap import gaps_from_ledger
from orchestrator.reconcile.offers import Selected, configured, placed_keys
from orchestrator.reconcile.passctx import PassContext
from orchestrator.reconcile.poolphase import PoolPhase
from orchestrator.reconcile.report import decision_json
from orchestrator.reconcile.results import ScaleOutResult
from orchestrator.reconcile.scaleout import PolicyInputs, ScaleOutDecision
from orchestrator.workspace.audit import audit

# The loop's own steps, handed in (its books and failure handling stay in one place):
# the policy's inputs and decisions as of ``now``, with the templates falling back and the
# (provider, placement key) pairs refused in this phase (under the loop's lock);
Decide = Callable[
    [PassContext, float, frozenset[str], frozenset[tuple[str, str]]], tuple[PolicyInputs, list[ScaleOutDecision]]
]
# Reconciler._create(ctx, provider, template, count, evidence, placements=...) → refused and closed.
Create = Callable[..., bool]


@dataclass
class ScaleOutRounds:
    """One scale-out phase (see the module docstring)."""

    config: Config
    state_dir: Path
    pool: PoolPhase
    decide: Decide
    create: Create
    # Template → the outcome of its last decision audited (the loop's, kept across passes).
    last_outcomes: MutableMapping[str, str]

    def run(self, ctx: PassContext, now: float) -> ScaleOutResult:
        """Pool takes, rounds of creates with their fallback, pool refills; what was done."""
        evidence = ScaleOutResult()
        rounds = 0
        fallback: set[str] = set()
        refused: set[tuple[str, str]] = set()
        ctx.gaps = dict(gaps_from_ledger(ctx.snapshot, ctx.records()))  # before the pool serves any of it
        self.pool.take(ctx, now, evidence)  # the warm pool first (docs/daemon.md, "The warm pool")
        most = 1
        while rounds < most:
            rounds += 1
            inputs, decisions = self.decide(ctx, now, frozenset(fallback), frozenset(refused))
            most = max(most, self._most_rounds(inputs.selected))
            self._audit(ctx, decisions)
            requests = [op for d in decisions for op in d.ops]
            if not requests:
                break
            any_refused = False
            for request in requests:
                placements = request.placements
                if self.create(ctx, request.provider, request.template, request.count, evidence, placements=placements):
                    any_refused = True
                    fallback.add(request.template)
                    refused |= placed_keys(self.config, request.template, request.provider, placements, inputs.selected)
            if not any_refused:
                break
        self.pool.refill(ctx, now, evidence)  # after the creates of the burst, never before them
        return replace(evidence, rounds=rounds)

    def _most_rounds(self, selected: Selected) -> int:
        """One round, and one more per offering or provider a refusal can exclude."""
        templates = self.config.templates.items()
        offerings = sum(
            max(1, len(configured(self.config, t, p, selected))) for t, on in templates for p in on.providers
        )
        return 1 + len(self.config.providers) + offerings

    def _audit(self, ctx: PassContext, decisions: list[ScaleOutDecision]) -> None:
        for decision in decisions:
            ctx.decisions.append(decision)
            # Every decision that asks for hosts is audited; a standing one (cooldown, no room,
            # breaker open) only when it changes, or the log would repeat it every pass.
            if decision.ops or self.last_outcomes.get(decision.template) != decision.outcome:
                audit(self.state_dir, "reconcile-scale-out", **decision_json(decision))
            self.last_outcomes[decision.template] = decision.outcome
