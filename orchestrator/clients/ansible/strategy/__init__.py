"""Ansible strategy plugins of the toolkit's runs (loaded by ansible-playbook, never imported here)."""
