"""Ansible callback plugins the runner loads into every play (a plugin directory, never imported)."""
