"""Simulated hosts: every running instance of the simulated cloud as a host reachable over real SSH.

See ``docs/simulated-world.md``. Modules: ``lab`` (the network), ``host`` (one host),
``boot`` (runs inside a host), ``cloudinit`` (the write_files subset), ``keys`` (SSH material),
``manager`` (the long-running host manager, ``python -m orchestrator.sim.hosts serve``).
"""
