"""The simulated XCE controller: the controller side of the provisioner protocol.

``core`` holds the state and rules (leases with epochs and grace, facts, hosts, workload,
demand) behind one lock and with an injected clock; ``store`` keeps facts, decommissioned hosts
and the term durable; ``server`` puts the core behind TLS listeners and the admin Unix socket;
``admin`` is the admin channel's client. See docs/protocol.md.
"""
