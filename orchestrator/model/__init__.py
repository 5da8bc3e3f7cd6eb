"""Typed data of the provisioner (configuration, tags, ops, plans); no I/O in this layer."""
