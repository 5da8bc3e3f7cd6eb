"""Orphans: finding cloud resources and facts that disagree, and acting on them carefully.

What lives here (coming issue): the comparison of refresh-only Terraform plans and tagged cloud
listings with the controller's facts, the orphan classes (requested but never joined, tagged
without a fact, ghost fact without a cloud object, licence grant not returned), and their
default actions: report first; automatic actions only with this cluster's and provider's tags,
a valid lease, both views read this cycle, the ``orphan_grace`` passed, rate limits, a circuit
breaker, the protect tag and dry-run. Every detection goes to the audit log with its evidence.

May import: ``orchestrator.reconcile`` (to share its pass inputs), ``ops`` (every action goes
through the fenced path), ``workspace``, ``clients``, ``render``, ``configfile``, ``paths``,
``protocol``, ``model`` and ``errors``. Never ``daemon``, ``services``, ``cli`` or ``sim``
(``.importlinter``).
"""
