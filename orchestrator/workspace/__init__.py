"""Workspace: what the orchestrator keeps on disk per cluster × provider.

What lives here: the Terraform working directories (``<state_dir>/work/<cluster>/<provider>/``
with the copied root and module), the desired instance set (``desired.tfvars.json``), the
audit log, plan bundles (the saved plans ``xceprov plan --out`` writes and ``xceprov apply``
applies) and the Terraform glue (engine with the provider mirror, prepared working directories).

May import: ``orchestrator.clients``, ``render``, ``configfile``, ``paths``, ``durable``,
``protocol``, ``model`` and ``errors``. Never ``ops`` or anything above it, nor ``sim``
(``.importlinter``).
"""
