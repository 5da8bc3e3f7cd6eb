"""The simulated XCE node manager: an artifact that runs on a host with only ``python3``.

What it does
    ``xce-node-manager`` reads its configuration, starts the ``worker`` role as a child process
    and keeps it running (restart with backoff), and stops it when the role is dropped
    (decommission: the file is rewritten with ``"roles": []`` and the node manager gets SIGHUP;
    the file is also re-read on a timer). The worker connects to the controller over TLS
    (verified against the configured CA), joins as a worker (instance id, host name, template),
    heartbeats, and rejoins after a reconnect; a refused join (decommissioned host) makes it exit
    with status 3, and the node manager then retries only at its longest backoff.

Configuration: JSON at ``/etc/xce/node-manager.json`` (written by cloud-init from
``templates/node-manager.json.j2``, rewritten by the bootstrap role)::

    {"roles": ["worker"],
     "controller": {"addresses": ["10.213.0.1:7441"], "ca_file": "/etc/xce/ca.pem",
                    "server_name": "<optional TLS name>", "client_cert": "", "client_key": ""},
     "template": "cpu", "host_name": "cpu-1", "instance_id": "i-123",
     "instance_key": "<op_id>-000", "op_id": "...", "xce": {...},
     "heartbeat_interval": 2.0}

JSON rather than YAML because the host has only ``python3`` (no PyYAML). ``instance_id``
(added by the bootstrap role) falls back to ``instance_key``.

Command line (``/opt/xce/bin/xce-node-manager``)::

    xce-node-manager [run] [--config FILE] [--pidfile FILE] [--state-file FILE] [--reload-interval S]
                           [--join-result FILE]  # the worker's join outcome (joinresult.py)
    xce-node-manager worker [--config FILE] [--join-result FILE]  # the worker role alone

Packaging: ``build_artifact(dest)`` writes ``xce-node-manager-sim.tar.gz``, to be unpacked into
``/opt/xce``: ``bin/xce-node-manager`` (a ``python3`` script), ``lib/xce_node_manager/`` (this
package's runtime modules and ``provisioner.capnp``), ``lib/capnp/`` (pycapnp copied from the
running environment) and ``MANIFEST.json``. Bundling pycapnp instead of writing a pure-Python
Cap'n Proto codec: simulated hosts run on this machine with the same Python ABI (CPython 3.11,
x86_64 glibc), pycapnp's wheel is self-contained (capnproto linked in statically, no jinja2
needed at run time), and speaking Cap'n Proto through the same library as the controller means
no second codec to keep byte-compatible. The cost is size (~8 MB compressed) and the ABI tie,
recorded in ``MANIFEST.json`` (``python_abi``); the entry script refuses a mismatching
interpreter with a one-line message.

The runtime modules (``codes``, ``config``, ``joinresult``, ``manager``, ``worker``, ``wire``, ``__main__``) import only
the standard library, pycapnp and each other (relative imports), because in the artifact this
package is ``xce_node_manager``, not ``orchestrator.sim.nodemanager``.
"""

from __future__ import annotations

from pathlib import Path


def build_artifact(dest: Path) -> Path:
    """Build ``dest/xce-node-manager-sim.tar.gz`` (see the module docstring); returns its path."""
    from .artifact import build

    return build(dest)
