"""Reconcile: turning demand and supply into ops.

What lives here: the policy that turns a gap between demand and supply into ops (provider by
priority and room under ``max_instances``, granularity; ``policy``), and, in the coming issues,
the inputs of one pass (demand snapshot, facts, desired sets, read once per pass), idle reclaim
and the ``run_once()`` loop with its ordered phases and injected clock.

May import: ``orchestrator.ops`` (to carry out the ops it decides), ``workspace``, ``clients``,
``render``, ``configfile``, ``paths``, ``protocol``, ``model`` and ``errors``. Never ``orphans``,
``daemon``, ``services``, ``cli`` or ``sim`` (``.importlinter``).
"""
