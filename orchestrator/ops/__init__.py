"""Ops: the one fenced path every cloud mutation takes (docs/operations.md).

``executor``: one op at a time (create N hosts of a template on a provider, or return a set of
hosts); collaborators of one concern each, handed to one another, used only through its
public face (docs/architecture.md, "The executor's rooms"). Under a valid lease it commits the op's intent
fact with the lease epoch, then changes the provider's desired set, plans and checks that the
plan does exactly what the op asked, applies it with Terraform (stopped gracefully if the lease
closes), and records the resulting facts (instance created, expected host, returning, returned,
lost). Nothing else in the orchestrator calls ``terraform apply`` on a working directory that
holds live instances. ``fence`` (lease or standalone lock), ``facts`` (controller or local
journal), ``hosts`` (drain, decommission at the controller), ``drain``, ``plancheck``,
``losses`` (the host-loss check before each apply), ``recorder`` (the gate, facts and audit
entries of every step), ``steps`` (render, variables and plan, shared with the plan preview),
``openops`` and ``resume`` are its parts.

May import: ``orchestrator.workspace`` (working directories, desired set, audit log),
``clients`` (Terraform engine, controller link, Ansible runner), ``render``, ``configfile``,
``paths``, ``protocol``, ``model`` and ``errors``. Never ``reconcile``, ``orphans``,
``daemon``, ``services``, ``cli`` or ``sim`` (``.importlinter``).
"""
