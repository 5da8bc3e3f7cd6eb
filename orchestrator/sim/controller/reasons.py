"""The reasons provisioners report (``reportReasons``): the latest per template, shown in the status.

A report replaces what its sender (the lease holder: identity[/leaseInstance]) reported before;
per template the newest report of any sender wins, so two daemons sharing a cluster each tell
their templates' reasons. Kept in memory: a restarted controller learns them at the next report
(the daemon reports at least every few minutes).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TemplateReasonV:
    """One template's reason as the controller shows it."""

    template: str
    code: str
    detail: str = ""
    provider: str = ""
    until_ms: int = 0
    holder: str = ""  # who reported it


@dataclass
class ReasonBoard:
    """The latest reason per template (see the module docstring)."""

    _by_template: dict[str, TemplateReasonV] = field(default_factory=dict)

    def report(self, holder: str, reasons: list[TemplateReasonV]) -> None:
        """``holder``'s report: its previous reasons go, these come."""
        for template in [t for t, r in self._by_template.items() if r.holder == holder]:
            del self._by_template[template]
        for reason in reasons:
            if reason.template:
                self._by_template[reason.template] = reason

    def latest(self) -> list[TemplateReasonV]:
        """Every template's reason, by template name."""
        return [self._by_template[t] for t in sorted(self._by_template)]
