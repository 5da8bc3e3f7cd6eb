"""Clients of the outside world: the Terraform engine, the Ansible runner, the controller link."""
