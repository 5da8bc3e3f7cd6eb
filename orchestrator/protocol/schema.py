"""The one place that loads ``provisioner.capnp``.

pycapnp aborts the interpreter (an uncatchable "Duplicate ID") when the same schema id is
loaded from two different paths, so the schema is loaded here, once, from the package
directory, and every user imports the loaded module from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import capnp

SCHEMA_PATH: Final = Path(__file__).resolve().with_name("provisioner.capnp")

# The loaded schema module. Typed ``Any``: pycapnp builds its classes at run time.
schema: Any = capnp.load(str(SCHEMA_PATH))

Envelope: Any = schema.Envelope
Epoch: Any = schema.Epoch
Fact: Any = schema.Fact

# Names of the Envelope union members, by group; used to check a message is of the right type.
REQUESTS: Final = frozenset(
    {
        "joinProvisioner", "joinWorker", "leaseAcquire", "leaseRenew", "leaseRelease",
        "commitFact", "queryFacts", "hostClose", "hostDecommission", "hostStatus",
        "requestDemand", "queryStatus", "heartbeat", "commitFacts", "hostNotice", "reportReasons",
        "adminFailover", "adminSubmit", "adminRevoke", "adminShutdown",
    }
)  # fmt: skip
ADMIN_REQUESTS: Final = frozenset({"adminFailover", "adminSubmit", "adminRevoke", "adminShutdown"})
REPLIES: Final = frozenset(
    {
        "joined", "leaseGrant", "leaseDeny", "ack", "reject", "factList", "hostList",
        "status", "ok", "adminReply", "error", "demand", "committed",
    }
)  # fmt: skip
# The most facts one ``commitFacts`` may carry (docs/protocol.md §6). Far below the decode
# limits (``decode.DecodeLimits``: 25,000 per list, 50,000 per message), and 1000 facts of a
# burst (about 200 bytes each without detail) fit one frame of the default 4 MiB many times over.
MAX_BATCH_FACTS: Final = 1000
PUSHES: Final = frozenset({"demand", "hostEvent", "leaseRevoked", "workerStop"})
