"""A Terraform command that failed because its state backend (the shared store) is away.

With ``terraform.backend: pg`` every command reads, locks and writes its state over a database
connection. When the database stops, Terraform fails with the driver's network error and advice
meant for a person at its own prompt: ``terraform force-unlock`` (needless: the pg backend's
lock is a session advisory lock, gone with Terraform's connection), ``terraform state push
errored.tfstate`` (the toolkit does it, see ``workspace.erroredstate``). That failure is the
store's, not Terraform's: :func:`store_unavailable` makes it a ``StoreUnavailable`` (exit 75,
retry later) with the toolkit's advice, decided by asking the store itself whether it answers
(``probe``), not by matching driver messages, which a provider's own network errors share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from orchestrator.errors import StoreUnavailable

# Why the state backend cannot be reached right now (one line, no secret), None when it answers.
BackendProbe = Callable[[], str | None]

# What Terraform writes in the working directory when it cannot write the state to its backend.
ERRORED_STATE: Final = "errored.tfstate"


def store_unavailable(
    name: str, args: Sequence[str], workdir: Path, probe: BackendProbe | None
) -> StoreUnavailable | None:
    """The error of a failed ``name ARGS`` in ``workdir`` when ``probe`` says the backend is away."""
    if probe is None:
        return None
    cause = probe()
    if cause is None:
        return None
    kept = ""
    if (workdir / ERRORED_STATE).is_file():
        kept = (
            f"; Terraform kept the state it could not write in {workdir / ERRORED_STATE}, which the next op "
            "on this provider writes to the store before anything else"
        )
    return StoreUnavailable(
        f"{name} {args[0] if args else ''} in {workdir}: the shared store holding its state cannot be reached "
        f"({cause}){kept}; nothing needs unlocking (Terraform's state lock ended with its connection): retry "
        "when the database answers (an op cut short stays open: xceprov ops resume)"
    )
