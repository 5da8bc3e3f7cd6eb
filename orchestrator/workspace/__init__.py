"""What the toolkit keeps on disk for Terraform: working directories, desired sets, plan bundles, the audit log.

Below the verbs (``services``) and the coming ``ops``/``reconcile`` layers, above the clients:
it may import ``clients``, ``render``, ``model``, ``configfile``, ``paths``, ``durable`` and
``errors``, never ``services`` or ``cli``.
"""
