"""The provider contract (LSF resource connector, Symphony host factory): its documents and actions.

The public face is :mod:`orchestrator.services.provider_contract`; this package holds its rooms,
one concern each: ``schemas`` (the documents), ``answers`` (the answer and error documents),
``intake`` (raw input to a validated document), ``catalogue`` (templates offered),
``requests`` (the contract's request records), ``create`` / ``giveback`` (the two mutations),
``progress`` (status of requests), ``reclaims`` (machines going away), ``worker`` (the detached
process that carries a request out).
"""
