"""The shared store of several orchestrators in PostgreSQL (``terraform.backend: pg``).

``SharedStore`` (``store.py``): documents fenced by lease epochs, members and their heartbeats,
the standalone fact journal, in the toolkit's own schema ``xceprov`` with versioned migrations
(``migrations.py``). ``ProviderLocks`` (``locks.py``): session advisory locks (the daemons'
scale-out lock). ``StandaloneLeases`` (``standalone.py``): the standalone fence, a lease row per
provider. ``TerraformStates`` (``tfstates.py``): reads the states Terraform's own pg backend
keeps (never writes them). ``redact`` (``redact.py``): keeps the connection string and its
password out of every message. The behaviour is documented in ``docs/shared-store.md``.

Every SQL statement of the toolkit is in this package, the only one that imports psycopg
(``.importlinter``, contract ``psycopg-in-postgres``); the rest of the orchestrator opens the
store through ``orchestrator.workspace.pgsite``.
"""

from orchestrator.clients.postgres.locks import ProviderLocks
from orchestrator.clients.postgres.migrations import check_schema
from orchestrator.clients.postgres.redact import redact
from orchestrator.clients.postgres.session import unreachable
from orchestrator.clients.postgres.standalone import StandaloneLeases
from orchestrator.clients.postgres.store import Member, SharedStore
from orchestrator.clients.postgres.tfstates import TerraformStates

__all__ = [
    "Member",
    "ProviderLocks",
    "SharedStore",
    "StandaloneLeases",
    "TerraformStates",
    "check_schema",
    "redact",
    "unreachable",
]
