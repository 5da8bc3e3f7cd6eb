"""Working directories made ready for the providers a daemon may take over (docs/daemon.md).

With a shared store (``terraform.backend: pg``), a daemon is configured for providers that
other daemons hold. Left alone, their working directories here stay empty until a takeover, which
then starts with ``terraform init`` (the backend configured, the provider plugins from the cache)
and the desired sets' local copies: seconds of Terraform before the survivor's first cloud call.
:func:`warm` prepares every shard of every configured provider ahead of time, held or not, on
the loop's thread between two passes (once after the first pass, again after a reload).

Nothing here needs the lease, because nothing here changes a cloud or a shared document: it
writes what any read without a lease writes (the orphan scan, ``xceprov ops``): the working
directory, the desired set's local copy, and, for a shard with no state in the database yet,
an empty one (Terraform refuses to push it over a state that holds anything). Every mutation
still goes through the fence. A provider that cannot be prepared is logged and left for its
first use, which prepares it again (and fails there with its one-line reason).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from orchestrator.ops.executor import Executor

log = logging.getLogger(__name__)


def warm(executor: Executor, providers: Iterable[str]) -> dict[str, str]:
    """Prepare every shard of each provider (init when missing or out of date, the desired sets'
    copies refreshed); the providers that could not be, with the first line of why."""
    failed: dict[str, str] = {}
    for provider in sorted(providers):
        try:
            executor.shards(provider)
        except Exception as exc:  # never the daemon's end: the provider's first use prepares it again
            failed[provider] = (str(exc).splitlines() or [type(exc).__name__])[0]
            log.warning("working directory of provider %s not prepared ahead: %s", provider, failed[provider])
    return failed
