"""The provider contract: the five actions of the LSF resource connector and the Symphony host
factory, each a thin layer over the fenced mutation path (``docs/provider-contract.md``).

``ProviderContract(config).handle(action, document)`` answers one action: ``document`` is what
the caller sent (bytes, text or parsed JSON), the answer a :class:`ContractAnswer` (the JSON
document and the one-shot exit code). Malformed documents, unknown templates and machines are
answered ``{"error": {...}, "message": ...}`` with exit 1 and change nothing (an unknown request
id is answered on its own by ``getRequestStatus``, "Request not found"); another holder of a
provider's fence is ``{"error": {"type": "held", "holder": ...}}`` with exit 9. ``handle`` may
be called from several threads at once (``xceprov provider serve``). The rooms of the contract
are in :mod:`orchestrator.services.contract`; ``SCHEMAS`` holds every document's JSON Schema.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.clients.terraform.engine import Engine
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import XceprovError
from orchestrator.model.config import Config
from orchestrator.services.contract import schemas
from orchestrator.services.contract.answers import ContractAnswer, answered, error_answer, refused
from orchestrator.services.contract.catalogue import available_templates
from orchestrator.services.contract.consumers import GENERIC, Consumer
from orchestrator.services.contract.create import request_machines
from orchestrator.services.contract.giveback import return_machines
from orchestrator.services.contract.intake import validated
from orchestrator.services.contract.progress import request_status
from orchestrator.services.contract.reclaims import return_requests
from orchestrator.services.contract.session import ContractSession
from orchestrator.services.contract.worker import spawn_worker

ACTIONS: tuple[str, ...] = (
    "getAvailableTemplates",
    "requestMachines",
    "getRequestStatus",
    "requestReturnMachines",
    "getReturnRequests",
)

SCHEMAS: dict[str, dict[str, Any]] = schemas.json_schemas()

INTERNAL_ERROR_EXIT = 70

__all__ = ["ACTIONS", "SCHEMAS", "ContractAnswer", "ProviderContract"]


class ProviderContract:
    """Answers the contract's actions for one configuration (see the module docstring).

    ``spawn_worker``: start each request's worker as a detached process (the one-shot and
    persistent forms); False leaves the request's op open for the caller to carry out
    (:meth:`carry_out`, tests). ``bootstrap``: whether workers bootstrap the new hosts (a site
    whose images join by themselves says no). ``toolkit_root`` and ``engine`` default to the
    installed toolkit's and the configured engine. ``consumer``: whose template ids and attribute
    names ``getAvailableTemplates`` answers (:mod:`.contract.consumers`).
    """

    def __init__(
        self,
        config: Config | LoadedConfig,
        *,
        spawn_worker: bool = True,
        bootstrap: bool = True,
        toolkit_root: Path | None = None,
        engine: Engine | None = None,
        clock: Callable[[], float] | None = None,
        consumer: Consumer = GENERIC,
    ) -> None:
        if isinstance(config, Config):
            config = LoadedConfig(config, "<configuration>", Path.cwd())
        if toolkit_root is None:
            from orchestrator.paths import toolkit_root as installed

            toolkit_root = installed()
        self.loaded = config
        self.spawned: list[str] = []
        spawner = self._spawn if spawn_worker else self._hold
        self.session = ContractSession(config, toolkit_root, spawner, bootstrap=bootstrap, engine_given=engine)
        if clock is not None:
            self.session.clock = clock
        self.session.consumer = consumer

    def _spawn(self, request_id: str) -> int:
        self.spawned.append(request_id)
        return spawn_worker(self.loaded, request_id)

    def _hold(self, request_id: str) -> int:
        self.spawned.append(request_id)
        return 0

    def handle(self, action: str, document: object) -> ContractAnswer:
        """The answer of ``action`` on ``document`` (never raises for what the caller sent)."""
        try:
            return answered(self._dispatch(action, document))
        except XceprovError as exc:
            return refused(exc)
        except Exception as exc:  # a bug still answers one JSON line (exit 70, as the CLI)
            return error_answer("failed", f"internal error: {type(exc).__name__}: {exc}", INTERNAL_ERROR_EXIT)

    def _dispatch(self, action: str, raw: object) -> dict[str, Any]:
        document = validated(action, raw)
        if isinstance(document, schemas.GetAvailableTemplatesInput):
            return available_templates(self.loaded.config, self.session.consumer)
        if isinstance(document, schemas.RequestMachinesInput):
            return request_machines(self.session, document)
        if isinstance(document, schemas.GetRequestStatusInput):
            return request_status(self.session, document)
        if isinstance(document, schemas.RequestReturnMachinesInput):
            return return_machines(self.session, document)
        assert isinstance(document, schemas.GetReturnRequestsInput)
        return return_requests(self.session, document)

    def carry_out(self, request_id: str) -> None:
        """Carry out a request's op here, as its worker would (``spawn_worker=False``)."""
        from orchestrator.services.contract.worker import carry_out

        carry_out(self.session, request_id)

    def close(self) -> None:
        """Nothing held between calls: each action takes and releases its own fence."""
