"""The join tokens of the first-boot hosts an op creates, minted for its plan and apply.

A ``first-boot`` template's host joins by itself (docs/bootstrap.md, "First boot"); its token is
minted here exactly as the push path mints it (``orchestrator.protocol.jointoken``: bound to the
instance key and host name, expiring at the host's join deadline, single use at the controller),
when the op plans the create. It reaches Terraform only as the root's ephemeral, sensitive
variable ``join_tokens`` (a module whose registry entry says it takes it), in a file beside the
saved plan in the op's private scratch directory (0600 in 0700, removed with the plan, and by the
next op after a crash: ``workspace.scratch``), given at plan and again at apply; Terraform keeps it
out of the plan file and the state. No desired set, bundle, log line or audit entry holds it: the
sinks hide any text of a token's form (``model.redaction.register_form``).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Protocol, TypeVar

from orchestrator.errors import ConfigError
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.firstboot import FIRST_BOOT, STARTED_OUTCOME, TOKEN_FORM, TOKENS_VARIABLE
from orchestrator.model.images import KIND_BUILDER
from orchestrator.model.instances import InstanceSpec
from orchestrator.model.modules import provider_module
from orchestrator.model.pool import in_pool
from orchestrator.model.redaction import register_form
from orchestrator.protocol.jointoken import JoinKeyError, join_token, read_join_key

# The file beside a saved plan holding the plan's ephemeral variables (given again at apply).
EPHEMERAL_FILE: Final = "ephemeral.tfvars.json"


@dataclass(frozen=True)
class Tokens:
    """The tokens of one create's first-boot hosts and the join deadline they expire at."""

    tokens: Mapping[str, str] = field(default_factory=dict)  # instance key -> token
    deadline: float = 0.0  # unix seconds: the hosts' join deadline (the tokens' expiry)

    def deadlines(self) -> dict[str, float]:
        """Instance key -> join deadline, for each first-boot host (its ``expectedHost`` fact's)."""
        return {key: self.deadline for key in self.tokens}


def is_first_boot(config: Config, template: str) -> bool:
    """Whether hosts of ``template`` join by themselves (``bootstrap.mode: first-boot``)."""
    found = config.templates.get(template)
    return found is not None and found.bootstrap.mode == FIRST_BOOT


def mint_tokens(config: Config, provider: str, specs: Mapping[str, InstanceSpec], now: float) -> Tokens:
    """A token for each first-boot instance of ``specs`` that boots to join (none when the
    provider's module does not take tokens: the configuration refuses such a template), expiring
    at ``now`` plus the provider's ``join_deadline`` (rounded up to a whole second, as in the token).

    A bake's builder (``xce:kind=builder``: no user data, it never joins) and a warm-pool
    instance launched stopped (``xce:pool=warm``: its first boot is the start that takes it, which
    mints its token then) get none: a token nobody presents is a credential kept for nothing."""
    chosen = {
        key: spec
        for key, spec in specs.items()
        if is_first_boot(config, spec.template) and spec.tags.get(owner.KIND) != KIND_BUILDER and not in_pool(spec.tags)
    }
    settings = config.providers[provider]
    entry = provider_module(settings.module)
    if not chosen or entry is None or not entry.join_tokens:
        return Tokens()
    key_path = config.controller.join_key
    if key_path is None:
        raise ConfigError(["controller.join_key: a first-boot template needs it to mint its hosts' join tokens"])
    try:
        join_key = read_join_key(key_path)
    except JoinKeyError as exc:
        raise ConfigError([f"controller.join_key: {exc}"]) from None
    register_form(TOKEN_FORM)  # before any token exists: no sink of this process shows one
    expires = math.ceil(now + float(settings.join_deadline))
    return Tokens({key: join_token(join_key, key, spec.name, expires) for key, spec in chosen.items()}, expires)


def write_ephemeral(plan_file: Path, tokens: Tokens) -> Path | None:
    """The ephemeral variables file beside ``plan_file`` (0600), or None when there is no token."""
    if not tokens.tokens:
        return None
    path = plan_file.parent / EPHEMERAL_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({TOKENS_VARIABLE: dict(tokens.tokens)}, handle)
    return path


def ephemeral_beside(plan_file: Path) -> list[Path]:
    """The ephemeral variables file of a saved plan, when it has one (what its apply gives again)."""
    path = plan_file.parent / EPHEMERAL_FILE
    return [path] if path.is_file() else []


class NewHost(Protocol):
    """What the branch reads of a created host (``ops.executor.Created``)."""

    @property
    def name(self) -> str:
        """The host name."""
        ...

    @property
    def template(self) -> str:
        """The host template."""
        ...


H = TypeVar("H", bound=NewHost)


def without_push(config: Config, created: Sequence[H]) -> tuple[list[H], dict[str, str]]:
    """The one branch between the two bootstrap modes: the hosts a push play runs on, and the
    outcome of each first-boot host (host name -> :data:`STARTED_OUTCOME`): started at its
    creation, no SSH and no play; its join before its deadline is its success, and the join
    deadline returns one that never joins, as for every host. ``xceprov bootstrap`` (a re-run by
    hand) does not come here: it pushes to every host it is given."""
    push = [c for c in created if not is_first_boot(config, c.template)]
    return push, {c.name: STARTED_OUTCOME for c in created if is_first_boot(config, c.template)}
