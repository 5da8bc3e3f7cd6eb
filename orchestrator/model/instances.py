"""What one instance looks like on its way into Terraform, and how ops and keys are named."""

from __future__ import annotations

import re
import secrets
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# The random part was 6 hex digits before host names carried it whole (docs/architecture.md,
# "Host names"); op ids of that form are still read.
OP_ID_RANDOM_BITS = 48
OP_ID_PATTERN = re.compile(r"^op-[0-9a-f]{8,}-(?:[0-9a-f]{12}|[0-9a-f]{6})$")


class InstanceSpec(BaseModel):
    """One entry of the ``instances`` variable every provider module takes (see docs/provider-modules.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=255)
    template: str
    flavor: str = Field(min_length=1)
    image: str = Field(min_length=1)
    tags: dict[str, str]
    user_data: str = ""
    disk_gb: int | None = Field(default=None, ge=1)
    network: str | None = None
    extra: dict[str, str] = Field(default_factory=dict)
    # The offering's placement (model/offerings.py): unset for a flavor with no zone or subnet.
    zone: str | None = None
    subnet: str | None = None
    # ``stopped``: a warm-pool instance (launched and kept stopped); ``running``: one started
    # from the pool; unset: the module leaves the instance's power as it is (every other host).
    power_state: Literal["running", "stopped"] | None = None

    def terraform_value(self) -> dict[str, Any]:
        """The JSON value Terraform receives (optional attributes left out when unset)."""
        return self.model_dump(exclude_none=True)


def new_op_id(now: float | None = None) -> str:
    """A fresh op id: ``op-<unix seconds, hex>-<12 random hex>``; sorts by creation time.

    Host names carry everything after ``op-`` (``templates/hostname.j2``): two ops' names can
    only meet when both were made in the same second and drew the same 48 random bits.
    """
    seconds = int(time.time() if now is None else now)
    return f"op-{seconds:08x}-{secrets.token_hex(OP_ID_RANDOM_BITS // 8)}"


def instance_key(op_id: str, index: int) -> str:
    """The key of instance ``index`` of an op: the Terraform map key and the cloud idempotency token."""
    return f"{op_id}-{index:03d}"


def op_of_key(key: str) -> str:
    """The op id an instance key belongs to."""
    return key.rsplit("-", 1)[0]
