"""The offerings of every ``select:`` template, as each pass of the daemon hands them to the policy.

A pass asks :meth:`SelectedOfferings.current` for ``PolicyInputs.selected``: (template, provider)
-> the offerings its ``select:`` picks from the provider's flavor catalogue, in the policy's
order (``model/catalogue.py``). The catalogues come from :class:`~orchestrator.ops.catalogue.
CatalogueReader`: a file read while they are younger than ``catalogue_ttl``, one Terraform run
per provider when one is older (so about once an hour a pass takes a few seconds longer), the
last catalogue kept when a read fails. A site without ``select:`` never reads anything.

Why a pair has no offering (its catalogue unreadable, a match without a price) is logged once
when it appears or changes, and kept in :attr:`SelectedOfferings.problems` for the status.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from orchestrator.errors import XceprovError
from orchestrator.model.catalogue import select_pairs
from orchestrator.model.config import Config
from orchestrator.model.offerings import Offering
from orchestrator.ops.catalogue import CatalogueReader

log = logging.getLogger(__name__)


class SelectedOfferings:
    """Each pass's ``selected`` mapping, read through one :class:`CatalogueReader` kept by the daemon."""

    def __init__(self, reader: CatalogueReader) -> None:
        self.reader = reader
        self.problems: Mapping[tuple[str, str], str] = {}
        # What the last call returned: the status prices select: instances with it (no read).
        self.last: Mapping[tuple[str, str], list[Offering]] = {}

    def current(self) -> Mapping[tuple[str, str], list[Offering]]:
        """(template, provider) -> its selected offerings; empty without any ``select:``."""
        self.last = {}
        if not select_pairs(self.reader.config):
            return {}
        try:
            found = self.reader.selections()
        except XceprovError as exc:  # a configuration the reader refuses: no pass may fail on it
            log.error("flavor catalogues: %s", exc)
            return {}
        for pair, why in sorted(found.problems.items()):
            if self.problems.get(pair) != why:
                log.warning("template %s on provider %s has no offering from the catalogue: %s", *pair, why)
        self.problems = dict(found.problems)
        self.last = found.selected
        return found.selected

    def reload(self, config: Config) -> None:
        """Select by ``config`` from the next call on (a reload: templates, settings, TTLs may change)."""
        self.reader.config = config
