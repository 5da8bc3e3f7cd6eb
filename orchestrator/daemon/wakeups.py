"""What wakes the daemon's loop: a demand push, a host event, a reload, a lease gained.

:class:`WakeUps` is the part of :class:`.service.Daemon` that notes why the next pass runs (one
pass serves every wake-up since the last one) and wakes the loop; the loop takes the reason with
:meth:`~WakeUps.take_trigger` and looks for a lease gained between passes with
:meth:`~WakeUps.lease_gained`.
"""

from __future__ import annotations

import threading

from orchestrator.clients.controller.keeper import LeaseKeeper
from orchestrator.clients.controller.types import DemandSnapshot, HostEvent
from orchestrator.configfile import LoadedConfig
from orchestrator.daemon.lifecycle import Lifecycle


class WakeUps:
    """The reasons for the next pass; :class:`.service.Daemon` sets the parts it reads."""

    lifecycle: Lifecycle
    keeper: LeaseKeeper | None
    _trigger_lock: threading.Lock
    _trigger: str
    # A reloaded configuration the loop has not applied yet.
    _reloaded: LoadedConfig | None
    _held_before: dict[str, bool]

    def wake(self, trigger: str) -> None:
        """Wake the loop for a pass, noting ``trigger`` as its reason."""
        with self._trigger_lock:
            # One pass serves every wake-up since the last one; a demand push names it first.
            if not self._trigger or trigger == "demand":
                self._trigger = trigger
        self.lifecycle.wake()

    def on_demand(self, _snapshot: DemandSnapshot) -> None:
        """A demand push (the link calls this)."""
        self.wake("demand")

    def on_host_event(self, _event: HostEvent) -> None:
        """A host event (the link calls this)."""
        self.wake("host-event")

    def on_reload(self, new: LoadedConfig) -> None:
        """A SIGHUP's configuration (the lifecycle calls this)."""
        # On the signal thread: only noted here; the loop applies it between two passes, so a
        # pass never sees its configuration change under it.
        with self._trigger_lock:
            self._reloaded = new
        self.wake("reload")

    def take_trigger(self) -> str:
        """The reason for the next pass, cleared; empty when nothing woke the loop."""
        with self._trigger_lock:
            trigger, self._trigger = self._trigger, ""
            return trigger

    def lease_gained(self) -> bool:
        """Whether a lease is held now that was not at the last look."""
        assert self.keeper is not None
        held = {s.provider: s.held for s in self.keeper.status()}
        gained = any(v and not self._held_before.get(p, False) for p, v in held.items())
        self._held_before = held
        return gained
