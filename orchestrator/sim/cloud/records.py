"""What the simulated cloud API returns: instances, journal entries, their states and reasons.

Also the cloud's clock format (RFC 3339, second precision) and its maximum-lifetime rule
(``expiry_of``): both are part of the values it reports.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal

from orchestrator.model.tags import MAX_LIFETIME, parse_max_lifetime
from orchestrator.sim.cloud.errors import InvalidParameterValue

State = Literal["running", "stopped", "terminated"]

RUNNING: Final = "running"
STOPPED: Final = "stopped"
TERMINATED: Final = "terminated"

# Reasons recorded when an instance leaves ``running`` (``Instance.state_reason``).
REASON_USER: Final = "user-terminate"
REASON_OUT_OF_BAND: Final = "out-of-band-delete"
REASON_SPOT: Final = "spot-reclaim"
REASON_STOP: Final = "user-stop"
# The cloud ended the instance itself at launch_time + xce:max_lifetime (not a caller's delete).
REASON_EXPIRED: Final = "expired"

# Actions of the mutation journal (``Mutation.action``).
ACTION_CREATE: Final = "create"
ACTION_DELETE: Final = "delete"
ACTION_TAGS: Final = "update-tags"
ACTION_STOP: Final = "stop"
ACTION_START: Final = "start"


@dataclass(frozen=True)
class Instance:
    """One simulated instance as the cloud API reports it."""

    id: str
    name: str
    flavor: str
    image: str
    tags: Mapping[str, str] = field(hash=False)
    user_data: str
    client_token: str
    address: str
    launch_time: str
    state: State
    # Why the instance left ``running`` (``spot-reclaim``, ``out-of-band-delete``...); "" otherwise.
    state_reason: str = ""
    # RFC 3339 time of termination; "" while not terminated. For reason ``expired``: the expiry.
    terminated_at: str = ""
    # RFC 3339 time at which the cloud ends the instance (launch_time + xce:max_lifetime); "" if never.
    expires_at: str = ""
    # Where the cloud placed it: the zone and subnet the create named ("" when none).
    zone: str = ""
    subnet: str = ""
    # Monotonic change counter of the store at this instance's last change (see ``changes_since``).
    version: int = field(default=0, compare=False)

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (the shape of ``xceprov sim cloud list --json``)."""
        return {
            "id": self.id,
            "name": self.name,
            "flavor": self.flavor,
            "zone": self.zone,
            "subnet": self.subnet,
            "image": self.image,
            "tags": dict(self.tags),
            "user_data": self.user_data,
            "client_token": self.client_token,
            "address": self.address,
            "launch_time": self.launch_time,
            "state": self.state,
            "state_reason": self.state_reason,
            "terminated_at": self.terminated_at,
            "expires_at": self.expires_at,
        }


@dataclass(frozen=True)
class Mutation:
    """One entry of the mutation journal: who changed which instance, how, under which epoch."""

    seq: int
    at: float
    cluster: str
    provider: str
    action: str
    instance_id: str
    client_token: str
    # The epoch tag (``<term>.<seq>``, ``none`` standalone) of the Terraform run that made the
    # change; "" for the cloud's own actions (expiry, spot reclaim) and the sim tooling.
    epoch: str
    # Why an instance was terminated (``user-terminate``, ``expired``...); "" for other actions.
    reason: str = ""

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (the shape of ``xceprov sim cloud mutations --json``)."""
        return {
            "seq": self.seq,
            "time": rfc3339(self.at),
            "cluster": self.cluster,
            "provider": self.provider,
            "action": self.action,
            "instance_id": self.instance_id,
            "client_token": self.client_token,
            "epoch": self.epoch,
            "reason": self.reason,
        }


def rfc3339_now() -> str:
    """The current UTC time as RFC 3339 with second precision (``2026-01-02T03:04:05Z``)."""
    return rfc3339(time.time())


def rfc3339(timestamp: float) -> str:
    """A Unix time as RFC 3339 UTC with second precision (``2026-01-02T03:04:05Z``)."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def expiry_of(launch_time: str, tags: Mapping[str, str]) -> float | None:
    """Unix time at which the cloud ends an instance: launch time + its ``xce:max_lifetime`` tag.

    ``None`` without the tag. A malformed tag raises ``InvalidParameterValue`` (the cloud refuses
    the call, as EC2 refuses a malformed parameter); an unreadable launch time, ``ValueError``.
    """
    value = tags.get(MAX_LIFETIME)
    if value is None:
        return None
    try:
        seconds = parse_max_lifetime(value)
    except ValueError as exc:
        raise InvalidParameterValue(f"InvalidParameterValue: {exc}") from None
    launched = datetime.fromisoformat(launch_time)
    if launched.tzinfo is None:
        launched = launched.replace(tzinfo=UTC)
    return launched.timestamp() + seconds


# States of an image (``Image.state``): made from an instance, then deleted by its owner.
AVAILABLE: Final = "available"
DELETED: Final = "deleted"

# Journal actions of images (``Mutation.instance_id`` then holds the image id).
ACTION_IMAGE_CREATE: Final = "create-image"
ACTION_IMAGE_DELETE: Final = "delete-image"
ACTION_IMAGE_TAGS: Final = "update-image-tags"


@dataclass(frozen=True)
class Image:
    """One simulated image as the cloud API reports it: a snapshot of an instance's files."""

    id: str
    name: str
    # The instance it was made from, and that instance's own image (what the image was built on).
    instance_id: str
    source_image: str
    tags: Mapping[str, str] = field(hash=False)
    created_at: str
    state: Literal["available", "deleted"]
    # RFC 3339 time of deletion; "" while available.
    deleted_at: str = ""

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict (every field, in order)."""
        return {**asdict(self), "tags": dict(self.tags)}
