"""Daemon: the one long-running process that does everything on its own timers, without cron.

``service`` is the process of ``xceprov daemon`` (docs/daemon.md): a lease keeper for every
provider (``clients.controller.keeper``: renewals in a child process), the controller link, one
executor (``guarded``: ops held as work in flight, none started once stopping; ``fence``: closed
a little before the stop bound) and the reconciler, the loop that runs its passes, and the status
file and metrics made from each pass (``statusdoc``, written by ``publish``); ``parts`` is what it
is built from, ``wakeups`` what wakes its loop. Its plumbing: ``metrics`` (Prometheus, a
registry of its own, off by default), ``logs`` (text or JSON lines; untrusted strings kept as
data), ``systemd`` (readiness, status, reload, stopping, watchdog), ``lifecycle`` (SIGTERM within
``daemon.stop_timeout``, SIGHUP keeping the last good configuration), ``restartonly`` (the keys
a reload keeps until the next start) and ``timeouts`` (the named timeouts, one name
everywhere). Coming: the orphan scan on its own timer.

May import: ``orchestrator.orphans``, ``reconcile``, ``ops``, ``workspace``, ``clients``,
``render``, ``configfile``, ``paths``, ``protocol``, ``model`` and ``errors``. Never
``services`` (a sibling layer), ``cli`` or ``sim`` (``.importlinter``).
"""
