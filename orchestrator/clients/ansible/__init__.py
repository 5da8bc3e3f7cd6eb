"""The Ansible side of the orchestrator: inventories, host keys, and the ansible-runner wrapper."""
