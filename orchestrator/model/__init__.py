"""Typed values of the provisioner; no I/O in this layer.

What lives here: the configuration schema (``config``, ``durations``), owner tags (``tags``),
instances and op ids (``instances``), facts and lease epochs (``facts``), demand snapshots
(``demand``), op requests (``ops``), cloud addresses and host names as checked values
(``hostnames``) and text made safe to print (``text``). Plain frozen dataclasses, enums and pydantic models.

May import: ``orchestrator.errors`` and the standard library or pydantic; nothing else of the
orchestrator (``.importlinter``). Every other layer, the simulated world included, may import it.
"""
