"""The embedded simulated world: cloud, controller, hosts and node manager.

Nothing in the orchestrator imports this package (``.importlinter``); the orchestrator reaches
the simulated world only through the interfaces of the real one (Terraform, SSH, the
controller protocol). Only ``orchestrator.cli`` wires it in.
"""
