"""The simulated controller's workload and demand: which hosts take pending work (first in, first
out per template), when work ends, and the demand picture pushed to provisioners.

Rules over the core's hosts and works, run under the core's lock; a host event goes out through
the core's ``event`` at the moment it happens (its frame shows the host as it is then).
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.sim.controller.state import Host, TemplateDemandV, Work

# Pushes a host event (kind, host) to the provisioners.
HostEvent = Callable[[str, Host], None]


def available(hosts: dict[int, Host], template: str) -> list[Host]:
    """Idle hosts of ``template``, longest idle first."""
    return [
        h
        for h in sorted(hosts.values(), key=lambda h: h.idle_since_ms)
        if h.template == template and h.state() == "idle"
    ]


def run(works: list[Work], hosts: dict[int, Host], now: float, now_ms: int, event: HostEvent) -> None:
    """Finish due work (hosts become idle) and start pending work first-in first-out."""
    for work in list(works):
        if work.started and now >= work.started + work.duration:
            works.remove(work)
            for hid in work.host_ids:
                host = hosts.get(hid)
                if host is not None and host.busy_work == work.wid:
                    host.busy_work = 0
                    host.idle_since_ms = now_ms
                    # A closing host is drained now: closed (and idle), never offered for work.
                    event("closed" if host.closed else "idleSince", host)
    blocked: set[str] = set()
    for work in works:
        if work.started or work.template in blocked:
            continue
        free = available(hosts, work.template)
        if len(free) < work.hosts:
            blocked.add(work.template)  # first-in first-out per template
            continue
        work.started = now
        for host in free[: work.hosts]:
            host.busy_work = work.wid
            host.idle_since_ms = 0
            work.host_ids.append(host.hid)
            event("busy", host)


def release_host(works: list[Work], hid: int) -> None:
    """Take a host out of the work it runs (it is gone or decommissioned); the work goes on."""
    for w in works:
        if hid in w.host_ids:
            w.host_ids.remove(hid)


def requeue(works: list[Work], hosts: dict[int, Host], hid: int, now_ms: int, event: HostEvent) -> Work | None:
    """The work host ``hid`` runs goes back to pending (the host is about to be lost): its other
    hosts are freed (idle, with their event) and the work starts again, first in its template's
    queue as it was; returns the work requeued (None: the host ran none)."""
    work = next((w for w in works if hid in w.host_ids), None)
    if work is None:
        return None
    for other in work.host_ids:
        host = hosts.get(other)
        if host is not None and host.busy_work == work.wid:
            host.busy_work = 0
            host.idle_since_ms = now_ms
            if other != hid:
                event("closed" if host.closed else "idleSince", host)
    work.started = 0.0
    work.host_ids.clear()
    return work


def compute_demand(works: list[Work], hosts: dict[int, Host]) -> tuple[TemplateDemandV, ...]:
    """Per template: pending work against idle, busy, joined and in-flight hosts."""
    names = {w.template for w in works} | {
        h.template for h in hosts.values() if h.template and not h.decommissioned and not h.lost
    }
    out = []
    for t in sorted(names):
        pending = sum(w.hosts for w in works if w.template == t and not w.started)
        of_template = [h for h in hosts.values() if h.template == t]
        states = [h.state() for h in of_template]
        idle = states.count("idle")
        busy = states.count("busy")
        joined = sum(1 for h in of_template if h.session is not None and not h.decommissioned)
        # A noticed host is leaving: not in flight, whatever its state (hostNotice).
        in_flight = sum(1 for h, s in zip(of_template, states, strict=True) if s == "expected" and not h.reclaim_at_ms)
        out.append(TemplateDemandV(t, max(0, pending - idle), pending, in_flight, joined, idle, busy))
    return tuple(out)
