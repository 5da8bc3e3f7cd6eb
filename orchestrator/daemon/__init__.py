"""Daemon: the one long-running process that does everything on its own timers, without cron.

Here now (docs/daemon.md): its process life and observability plumbing:
``metrics`` (Prometheus metrics in a registry of their own, the endpoint, off by default),
``logs`` (text or JSON lines with decision fields; untrusted strings kept as data),
``systemd`` (readiness, status, reload, stopping and watchdog notification),
``lifecycle`` (SIGTERM within ``daemon.stop_timeout``, SIGHUP reload keeping the last good
configuration) and ``timeouts`` (the named timeouts, one name everywhere).

Coming: the process of ``xceprov daemon``: one lease keeper per provider
(``clients.controller.keeper``: renew every TTL/3, stop mutating at the lease deadline, release
on clean exit), the timers that run the reconcile loop, idle reclaim and orphan scans.

May import: ``orchestrator.orphans``, ``reconcile``, ``ops``, ``workspace``, ``clients``,
``render``, ``configfile``, ``paths``, ``protocol``, ``model`` and ``errors``. Never
``services`` (a sibling layer), ``cli`` or ``sim`` (``.importlinter``).
"""
