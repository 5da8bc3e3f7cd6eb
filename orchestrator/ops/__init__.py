"""Ops: the one fenced path every cloud mutation takes.

What lives here (next issue): the executor of one op (create N hosts of a template on a
provider, or return a set of hosts). Under a valid lease it commits the op's intent fact with
the lease epoch, then changes the provider's desired set, applies it with Terraform, and
records the resulting facts (instance created, expected host, returned). Nothing else in the
orchestrator calls ``terraform apply`` on a working directory that holds live instances.

May import: ``orchestrator.workspace`` (working directories, desired set, audit log),
``clients`` (Terraform engine, controller link, Ansible runner), ``render``, ``configfile``,
``paths``, ``protocol``, ``model`` and ``errors``. Never ``reconcile``, ``orphans``,
``daemon``, ``services``, ``cli`` or ``sim`` (``.importlinter``).
"""
