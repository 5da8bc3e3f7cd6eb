"""Daemon: the one long-running process that does everything on its own timers, without cron.

What lives here (coming issue): the process of ``xceprov daemon``: one lease keeper per
provider (``clients.controller.keeper``: renew every TTL/3, stop mutating at the lease
deadline, release on clean exit), the timers that run the reconcile loop, idle reclaim and
orphan scans, signal handling and a clean shutdown.

May import: ``orchestrator.orphans``, ``reconcile``, ``ops``, ``workspace``, ``clients``,
``render``, ``configfile``, ``paths``, ``protocol``, ``model`` and ``errors``. Never
``services`` (a sibling layer), ``cli`` or ``sim`` (``.importlinter``).
"""
