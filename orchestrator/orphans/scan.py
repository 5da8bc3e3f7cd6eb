"""The orphan scan: read both views in one pass, classify, guard, act (or only report).

``OrphanScanner(config, ops, controller, clock, state_dir).scan(act, provider)``:

1. the controller's view (status, hosts, every provider's facts), then every provider's cloud
   views (each shard's refresh-only plan; shard 0's listing). The controller is read first: an
   op's intent is committed before its cloud call, so an object made between the two reads is
   of an op already known to be in flight, never mistaken for class (b);
2. the classes (:mod:`.classes`) with their evidence; class (c) counts observations with the
   host-loss tracker (:mod:`.ghosts`);
3. the breaker per provider, then the guards (:mod:`.guards`) per finding, then the action
   (:mod:`.actions`) through the executor, each counted by the rate limit (:mod:`.limits`);
4. every detection and every action (taken, skipped and why, or would be taken) in the audit
   log with its evidence, the epoch and who confirmed it.

``xceprov orphans`` scans with ``act=False`` (report only); the daemon with ``act=True`` on its
timer; :meth:`OrphanScanner.confirm` is the administrator's ``adopt``/``return`` of one finding,
through the same guards.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.errors import UsageError, XceprovError
from orchestrator.model.config import Config
from orchestrator.model.facts import FactKind
from orchestrator.ops.executor import Wired
from orchestrator.ops.fence import epoch_tag
from orchestrator.orphans import actions, classes
from orchestrator.orphans.classes import (
    ADOPT,
    CLASS_A,
    CLASS_B,
    CLASS_C,
    CLASS_D,
    CLASS_E,
    REPORT,
    RETIRE,
    RETURN,
    TERMINATE,
    Finding,
)
from orchestrator.orphans.confirm import Confirmation, judge
from orchestrator.orphans.ghosts import lost_instances
from orchestrator.orphans.guards import GuardState, blocking, refusal, settle
from orchestrator.orphans.inputs import (
    ControllerRead,
    ProviderRead,
    ScanController,
    first_line,
    read_controller,
    read_provider,
)
from orchestrator.orphans.limits import Breaker, RateLimit
from orchestrator.orphans.report import ProviderSummary, ScanReport
from orchestrator.workspace.audit import audit
from orchestrator.workspace.sharedstore import cluster_documents

log = logging.getLogger(__name__)

Clock = Callable[[], float]
AUTOMATIC = "policy (automatic)"
LICENCES_NOT_SCANNED = "licences are not provisioned yet (the class exists in the model and the report)"
NO_LISTING = "the module cannot list the cloud by tag (tagged_supported false): tagged objects are not scanned"


class OrphanScanner:
    """One cluster's orphan scan over an executor (the fenced path) and the controller's view."""

    def __init__(
        self, config: Config, ops: Wired, controller: ScanController | None, clock: Clock, state_dir: Path
    ) -> None:
        self.config = config
        # The executor (the fenced path) and its parts (facts, fence, recorder), as built together.
        self.ops = ops
        self.parts = ops.parts
        self.controller = controller
        self.clock = clock
        self.state_dir = Path(state_dir)

    # -- the scan ----------------------------------------------------------------------------

    def scan(self, act: bool = False, provider: str | None = None) -> ScanReport:
        """Scan every provider (or one); act on what the policy and the guards allow when ``act``."""
        return self._run(act, provider, None)

    def confirm(self, ref: str | Confirmation, action: str = "", provider: str | None = None) -> Finding:
        """The administrator's ``adopt`` or ``return`` of the finding ``ref`` (object id or key).

        A fresh scan finds it (so the evidence is this pass's), then the same guards as the
        daemon's apply to it, every one that refuses named (:mod:`.confirm`); ``UsageError``
        when there is no such finding or the action does not fit its class.
        """
        confirmation = ref if isinstance(ref, Confirmation) else Confirmation(ref, action)
        if confirmation.action not in ("adopt", "return"):
            raise UsageError(f"orphans: unknown action {confirmation.action!r} (adopt or return)")
        return self._run(True, provider, confirmation).findings[0]

    def _run(self, act: bool, provider: str | None, confirm: Confirmation | None) -> ScanReport:
        providers = self._providers(provider)
        now = self.clock()
        # A confirmation's --dry-run is a dry run of the whole pass: no suspects counted either.
        dry_run = self.config.policy.orphans.dry_run or (confirm is not None and confirm.dry_run)
        report = ScanReport(self.config.cluster, now, act=act, dry_run=dry_run)
        ctl = read_controller(self.controller, providers)
        if self.controller is None:
            # Standalone: the local journal still says what was made (reported, never acted on).
            ctl.facts = {p: self.parts.facts.facts(p) for p in providers}
        report.controller = _controller_json(ctl)
        rate = RateLimit(
            self.state_dir, self.config.policy.orphans, now, cluster_documents(self.config, self.state_dir)
        )
        by_provider: list[tuple[GuardState, list[Finding]]] = []
        for name in providers:
            cloud = read_provider(self.ops, name)
            state, summary, found = self._provider(name, ctl, cloud, now, act, dry_run, rate)
            report.providers.append(summary)
            by_provider.append((state, found))
        for state, found in by_provider:
            if confirm is not None:
                found = self._confirmable(found, confirm.ref, confirm.action)
            # Ghosts first: a return's plan would re-create a lost key still in the desired set.
            for finding in sorted(found, key=lambda f: f.cls != CLASS_C):
                if confirm is None:
                    self._decide(finding, state, AUTOMATIC)
                else:
                    self._decide_confirmed(finding, state, confirm)
            report.findings.extend(found)
        if confirm is not None and not report.findings:
            raise UsageError(f"orphans: {confirm.ref} is not a current finding (xceprov orphans lists them)")
        report.finished = self.clock()
        audit(
            self.state_dir,
            "orphan-scan",
            act=act,
            dry_run=dry_run,
            providers=[p.to_json() for p in report.providers],
            findings=len(report.findings),
            outcomes=sorted({f.outcome for f in report.findings}),
        )
        for s in report.providers:
            for line in s.not_scanned.items():
                log.info("orphans: %s: class (%s) not scanned: %s", s.provider, *line)
        return report

    def _providers(self, provider: str | None) -> list[str]:
        return providers_of(self.config, provider)

    def _provider(
        self,
        provider: str,
        ctl: ControllerRead,
        cloud: ProviderRead,
        now: float,
        act: bool,
        dry_run: bool,
        rate: RateLimit,
    ) -> tuple[GuardState, ProviderSummary, list[Finding]]:
        facts = ctl.facts.get(provider)
        index = classes.FactIndex.of(facts or [])
        listing = cloud.listing
        listed = listing.by_id() if listing is not None and listing.supported else {}
        summary = ProviderSummary(provider, shards=len(cloud.shards))
        summary.drift = "read" if cloud.drift_read else "unreadable: " + ("; ".join(cloud.errors()) or "not read")
        summary.listing = _listing_status(cloud)
        summary.not_scanned[CLASS_D] = LICENCES_NOT_SCANNED
        found: list[Finding] = []
        if facts is None:
            why = f"the controller's facts are unread ({ctl.error})"
            summary.skip_unread({CLASS_A: why, CLASS_B: why, CLASS_C: why, CLASS_E: why})
        else:
            found += self._class_a(provider, index, ctl, cloud, listed, now, summary)
            found += self._class_b(provider, index, ctl, cloud, summary)
            found += self._class_c(provider, index, cloud, persist=act and not dry_run, summary=summary)
        summary.instances = len(
            {r.instance_id or k for k, r in index.records.items() if r.created is not None and not r.gone}
            | {
                o.id
                for o in listed.values()
                if classes.ours(o, self.config.cluster, provider) and o.state in classes.LIVE_CLOUD_STATES
            }
        )
        orphans = self.config.policy.orphans
        breaker = Breaker(len(found), summary.instances, orphans.breaker_share, orphans.breaker_min)
        state = GuardState(
            self.config,
            provider,
            now,
            act,
            dry_run,
            self.parts.fence.valid(provider),
            ctl,
            cloud,
            settle(self.config, ctl, provider, now),
            breaker,
            rate,
        )
        summary.lease = state.lease_valid
        summary.settle = state.settle.to_json()
        summary.breaker = breaker.to_json()
        summary.actions_left = rate.remaining(provider)
        if breaker.open:
            audit(self.state_dir, "orphan-breaker-open", provider=provider, **breaker.to_json())
        return state, summary, found

    def _class_a(
        self,
        provider: str,
        index: classes.FactIndex,
        ctl: ControllerRead,
        cloud: ProviderRead,
        listed: dict[str, Any],
        now: float,
        summary: ProviderSummary,
    ) -> list[Finding]:
        if not ctl.complete:
            why = f"the controller's hosts are unread ({ctl.error})"
            if self.controller is None:
                summary.not_scanned[CLASS_A] = why  # standalone: there is no such view to read
            else:
                summary.skip_unread({CLASS_A: why})
            return []
        missing = frozenset(k for s in cloud.shards if s.drift is not None for k in s.drift.deleted)
        return classes.never_joined(provider, index, ctl.hosts, listed, now, missing)

    def _class_b(
        self,
        provider: str,
        index: classes.FactIndex,
        ctl: ControllerRead,
        cloud: ProviderRead,
        summary: ProviderSummary,
    ) -> list[Finding]:
        listing = cloud.listing
        if listing is None:
            why = "the listing is unread: " + ("; ".join(cloud.errors()) or "not read")
            summary.skip_unread({CLASS_B: why, CLASS_E: why})
            return []
        if not listing.supported:
            summary.not_scanned[CLASS_B] = summary.not_scanned[CLASS_E] = NO_LISTING
            return []
        action = self.config.providers[provider].orphan_action or self.config.policy.orphans.action
        found, in_flight = classes.tagged_no_fact(
            provider, self.config.cluster, index, ctl.hosts, listing.objects, action
        )
        summary.in_flight = in_flight
        kept = frozenset(self.ops.executor.workdir(provider).desired.images())
        return found + classes.bake_leftovers(
            provider, self.config.cluster, index, listing.objects, listing.images, kept
        )

    def _class_c(
        self, provider: str, index: classes.FactIndex, cloud: ProviderRead, *, persist: bool, summary: ProviderSummary
    ) -> list[Finding]:
        if not cloud.drift_read:
            summary.skip_unread({CLASS_C: "the drift is unread: " + "; ".join(cloud.errors())})
        return classes.ghosts(provider, index, lost_instances(self.ops, cloud, persist))

    # -- decisions ---------------------------------------------------------------------------

    @staticmethod
    def _confirmable(found: Sequence[Finding], ref: str, action: str) -> list[Finding]:
        """The one finding ``ref``, its action set to what the administrator confirmed."""
        hit = [f for f in found if ref in (f.object_id, f.instance_key)]
        if not hit:
            return []
        finding = hit[0]
        if action == "adopt":
            if finding.cls != CLASS_B or finding.action != ADOPT:
                raise UsageError(
                    f"orphans adopt {ref}: class ({finding.cls}) "
                    + (
                        "matches no live host (instance id, host name or address): nothing to adopt; "
                        "xceprov orphans return terminates it"
                        if finding.cls == CLASS_B
                        else "is not a tagged object"
                    )
                )
        elif finding.action == ADOPT:
            raise UsageError(
                f"orphans return {ref}: it matches the live host {finding.adopt_host}; adopt it "
                "(xceprov orphans adopt), or drain and return the host (xceprov return)"
            )
        elif finding.cls == CLASS_E:
            raise UsageError(
                f"orphans {action} {ref}: class (e) is reported only; return a builder with xceprov return, "
                "delete an image with xceprov image delete (docs/images.md)"
            )
        else:
            finding.action = {CLASS_A: RETURN, CLASS_B: TERMINATE, CLASS_C: RETIRE}[finding.cls]
        return [finding]

    def _decide(self, finding: Finding, state: GuardState, confirmed_by: str) -> None:
        epoch = self._epoch(finding.provider) if state.lease_valid else ""
        self._audit("orphan-detected", finding, epoch=epoch)
        if finding.action == REPORT:
            self._report(finding, state)
            return
        why = refusal(finding, state)
        if why:
            would = not state.act or state.dry_run
            finding.outcome, finding.reason = ("would-take" if would else "skipped"), why
            self._audit("orphan-action-skipped" if not would else "orphan-action-dry-run", finding, epoch=epoch)
            return
        self._act(finding, state, epoch, confirmed_by)

    def _decide_confirmed(self, finding: Finding, state: GuardState, confirm: Confirmation) -> None:
        """An administrator's confirmation: every refusing guard named, the time guards waived
        when asked (audited before the action), nothing changed on a dry run."""
        epoch = self._epoch(finding.provider) if state.lease_valid else ""
        self._audit("orphan-detected", finding, epoch=epoch)
        verdict = judge(blocking(finding, state), state, confirm)
        who = {"confirmed_by": confirm.who.by, "who": confirm.who.to_json()}
        waived = [b.to_json() for b in verdict.waived]
        if verdict.refused:
            finding.outcome, finding.reason = "skipped", verdict.reason(confirm)
            refused = [b.to_json() for b in verdict.refused]
            self._audit("orphan-action-skipped", finding, epoch=epoch, dry_run=state.dry_run, refused=refused, **who)
            return
        if state.dry_run:
            finding.outcome = "would-take"
            finding.reason = "dry run: nothing changed" + (
                f"; --confirm waives {', '.join(b.guard for b in verdict.waived)}" if waived else ""
            )
            self._audit("orphan-action-dry-run", finding, epoch=epoch, waived=waived, **who)
            return
        by = confirm.who.by
        if waived:
            # Durable before the action: the log says who passed which guard even if it fails.
            self._audit("orphan-guards-waived", finding, epoch=epoch, waived=waived, **who)
            by += f", waiving {', '.join(b.guard for b in verdict.waived)}"
        self._act(finding, state, epoch, by, waived=waived, who=confirm.who.to_json())

    def _act(self, finding: Finding, state: GuardState, epoch: str, confirmed_by: str, **more: Any) -> None:
        """Take the finding's action through the executor; ``more`` goes into the audit entries."""
        # Held by the executor like an op (the daemon refuses it once stopping).
        with self.parts.recorder.action(f"orphan {finding.action} of {finding.object_id or finding.instance_key}"):
            state.rate.take(finding.provider)  # counted before the action: a crash never forgets one
            try:
                result = actions.take(self.ops, finding, confirmed_by, automatic=confirmed_by == AUTOMATIC)
            except XceprovError as exc:
                finding.outcome, finding.reason = "failed", first_line(exc)
                self._audit("orphan-action-failed", finding, epoch=epoch, confirmed_by=confirmed_by, **more)
                return
        finding.outcome, finding.reason = "taken", result
        self._audit("orphan-action", finding, epoch=epoch, confirmed_by=confirmed_by, **more)

    def _report(self, finding: Finding, state: GuardState) -> None:
        """A (b) finding the policy only reports: the ``orphanReported`` fact when the scan acts."""
        finding.outcome = "reported"
        blocked = (
            "report only: this scan does not act"
            if not state.act
            else "dry run: no fact committed"
            if state.dry_run
            else ""
            if state.lease_valid
            else f"no valid lease on provider {state.provider}: no fact committed"
        ) or state.views_complete()
        if blocked:
            finding.reason = blocked
            return
        if any(
            f.kind == FactKind.ORPHAN_REPORTED and f.instance_id == finding.object_id
            for f in state.controller.facts.get(finding.provider, [])
        ):
            finding.reason = "reported before (orphanReported fact at the controller)"
            return
        try:
            with self.parts.recorder.action(f"orphan report of {finding.object_id}"):
                actions.orphan_fact(self.parts.recorder, FactKind.ORPHAN_REPORTED, finding, "orphan report")
        except XceprovError as exc:
            finding.reason = f"orphanReported fact not committed: {first_line(exc)}"
            return
        finding.reason = "orphanReported fact committed"

    def _epoch(self, provider: str) -> str:
        try:
            return epoch_tag(self.parts.fence.gate(provider))
        except XceprovError:
            return ""

    def _audit(self, action: str, finding: Finding, **more: Any) -> None:
        audit(self.state_dir, action, finding=finding.to_json(), **more)


def providers_of(config: Config, provider: str | None) -> list[str]:
    """The providers a scan covers: every one, or ``provider`` (``UsageError`` naming the known ones)."""
    if provider is None:
        return sorted(config.providers)
    if provider not in config.providers:
        known = ", ".join(sorted(config.providers))
        raise UsageError(f"--provider {provider}: no such provider (known: {known})")
    return [provider]


def _listing_status(cloud: ProviderRead) -> str:
    listing = cloud.listing
    if listing is None:
        shard0 = next((s for s in cloud.shards if s.index == 0), None)
        return "unreadable: " + (shard0.error if shard0 is not None and shard0.error else cloud.error or "not read")
    return "read" if listing.supported else "not supported by the module"


def _controller_json(ctl: ControllerRead) -> dict[str, Any]:
    status = ctl.status
    return {
        "read": ctl.complete,
        "error": ctl.error,
        "term": status.term if status else 0,
        "term_started": status.term_started if status else 0.0,
        "hosts": len(ctl.hosts),
    }
