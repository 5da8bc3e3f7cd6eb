"""The provisioner protocol: the Cap'n Proto schema, the frame codec and the TLS helpers.

Shared by the controller link (``orchestrator.clients.controller``) and the simulated
controller. The schema is loaded exactly once, by :mod:`orchestrator.protocol.schema`; import
``Envelope`` (or ``schema``) from there, never call ``capnp.load`` on the file yourself.
The wire format is described in ``docs/protocol.md``.
"""
