"""Interruption notices of a provider's instances, read through its module's notice API.

How a cloud's notices are read is the provider module's (the registry's ``notices``,
``orchestrator.model.modules``): a :data:`NoticeRead` per module name, handed in by the layer
that may build it (the command line binds the simulated cloud's; EC2's Spot interruption
warning and the other clouds' feeds are documented, docs/provider-modules.md, not built in). A
provider whose module has no reader gets no notice: its reclaims are found by the host-loss path.

:class:`NoticeReader` is what the daemon's notice watch calls once per provider and
``daemon.notice_interval``: every raw notice checked (``orchestrator.model.notices.checked``:
instance ids, times, sizes), at most ``MAX_NOTICES`` kept, the refused ones and the clamps
logged (once per instance and reason: a feed repeating a bad notice every read logs it once).
A reader that raises gives no notice this time (logged); the next read tries again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.model.config import Config
from orchestrator.model.modules import provider_module
from orchestrator.model.notices import MAX_NOTICES, InterruptionNotice, checked

log = logging.getLogger(__name__)

# (configuration, provider) -> the raw notices of the provider's tagged instances (untrusted).
NoticeRead = Callable[[Config, str], Sequence[object]]


@dataclass(frozen=True)
class NoticeBatch:
    """One read of a provider's notices: those accepted, and one line per notice refused."""

    notices: tuple[InterruptionNotice, ...] = ()
    refused: tuple[str, ...] = ()
    error: str = ""


@dataclass
class NoticeReader:
    """The notices of a provider's instances, checked (see the module docstring)."""

    config: Callable[[], Config]
    readers: Mapping[str, NoticeRead]
    clock: Callable[[], float] = time.time
    _logged: set[tuple[str, str]] = field(default_factory=set)

    def reads(self, provider: str) -> bool:
        """Whether ``provider``'s module has a notice reader here."""
        config = self.config()
        module = config.providers[provider].module if provider in config.providers else ""
        entry = provider_module(module)
        return entry is not None and entry.notices is not None and module in self.readers

    def __call__(self, provider: str) -> NoticeBatch:
        """The notices of ``provider``'s instances now (none when its module has no reader)."""
        config = self.config()
        if not self.reads(provider):
            return NoticeBatch()
        read = self.readers[config.providers[provider].module]
        try:
            raw = list(read(config, provider))
        except Exception as exc:  # a cloud API that fails: no notice this time, the next read tries again
            error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            log.warning("interruption notices of provider %s not read: %s", provider, error)
            return NoticeBatch(error=error)
        now = self.clock()
        accepted: list[InterruptionNotice] = []
        refused: list[str] = []
        for item in raw:
            if len(accepted) >= MAX_NOTICES:
                refused.append(f"more than {MAX_NOTICES} notices in one read: the rest wait for the next")
                break
            result = checked(provider, item, now)
            if isinstance(result, str):
                refused.append(result)
                self._once(provider, result, "interruption notice of provider %s refused: %s")
                continue
            for clamp in result.clamped:
                self._once(provider, f"instance {result.instance_id}: {clamp}", "interruption notice of %s: %s")
            accepted.append(result)
        return NoticeBatch(tuple(accepted), tuple(refused))

    def _once(self, provider: str, text: str, fmt: str) -> None:
        if (provider, text) in self._logged:
            return
        if len(self._logged) > 10_000:  # bounded: a feed that varies its garbage cannot fill memory
            self._logged.clear()
        self._logged.add((provider, text))
        log.warning(fmt, provider, text)
