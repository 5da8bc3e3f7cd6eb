"""An administrator's confirmation of one finding (``xceprov orphans adopt|return ID``).

Who confirmed (:class:`Admin`: the user and uid the process runs as, and the user ``sudo``
names), what was asked (:class:`Confirmation`: a dry run, an explicit waiver of the time guards)
and how the guards' verdict is said to them (:func:`judge`): every guard that blocks, in one
line, with what ``--confirm`` would waive and what it never does.

The waiver covers the time guards only (``settle_window``, ``orphan_grace``): an administrator
may know that a failover settled or that an object launched a minute ago is a stray. Whether
the object is this cluster's and provider's (``tags``) and whether it is protected
(``protect``) are facts about the object, never a matter of waiting: no confirmation passes
them. Nor the lease (the fence), both views read (nothing to judge by otherwise), the breaker
or the rate limit (configuration: change ``policy.orphans`` and reload).
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field
from typing import Any

from orchestrator.orphans.guards import OWNERSHIP_GUARDS, TIME_GUARDS, Blocked, GuardState, lease_held_elsewhere


@dataclass(frozen=True)
class Admin:
    """Who runs the confirmation (what the audit log keeps)."""

    user: str
    uid: int
    sudo_user: str = ""

    @classmethod
    def current(cls) -> Admin:
        """This process's user and uid; ``SUDO_USER`` when run through sudo (who typed it)."""
        return cls(getpass.getuser(), os.getuid(), os.environ.get("SUDO_USER", "") if os.getuid() == 0 else "")

    @property
    def by(self) -> str:
        """``confirmed_by`` of the audit entries and the return's reason."""
        via = f", sudo from {self.sudo_user}" if self.sudo_user else ""
        return f"administrator {self.user} (uid {self.uid}{via})"

    def to_json(self) -> dict[str, Any]:
        """The audit entry's ``who``."""
        return {"user": self.user, "uid": self.uid, "sudo_user": self.sudo_user}


@dataclass(frozen=True)
class Confirmation:
    """``adopt`` or ``return`` of the finding ``ref``, as the administrator asked it."""

    ref: str
    action: str
    dry_run: bool = False  # --dry-run: judge every guard, change nothing
    waive_time: bool = False  # --confirm: waive the time guards for this finding
    who: Admin = field(default_factory=Admin.current)


@dataclass(frozen=True)
class Verdict:
    """The guards' verdict on a confirmation: what refuses it and what the waiver passes."""

    refused: list[Blocked]
    waived: list[Blocked]

    def reason(self, confirmation: Confirmation) -> str:
        """One line naming every guard that refuses, and what ``--confirm`` can and cannot do."""
        names = ", ".join(b.guard for b in self.refused)
        line = f"refused by {names}: " + "; ".join(b.reason for b in self.refused)
        timed = [g for g in TIME_GUARDS if g in {b.guard for b in self.refused}]
        if timed and not confirmation.waive_time:
            line += f" (--confirm waives {' and '.join(timed)})"
        if {b.guard for b in self.refused} & set(OWNERSHIP_GUARDS):
            line += " (tags and the protect tag are never waived)"
        return line


def judge(blocked: list[Blocked], state: GuardState, confirmation: Confirmation) -> Verdict:
    """The verdict on ``blocked`` (every guard refusing the finding) for ``confirmation``.

    The confirmation is the act; ``dry_run`` is said by the outcome, not as a refusal. A dry run
    holds no lease: the lease guard asks instead whether another holder has it.
    """
    kept = [b for b in blocked if b.guard not in ("act", "dry_run")]
    if confirmation.dry_run:
        kept = [b for b in kept if b.guard != "lease"]
        if held := lease_held_elsewhere(state.controller, state.provider):
            kept.append(Blocked("lease", held))
    waived = [b for b in kept if confirmation.waive_time and b.guard in TIME_GUARDS]
    return Verdict([b for b in kept if b not in waived], waived)
