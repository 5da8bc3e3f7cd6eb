"""Owner tags: the keys every cloud resource made by the toolkit carries.

They are how the toolkit proves a resource is its own: anything without this cluster's
``xce:cluster`` and the provider's ``xce:provider`` tag is never touched.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

CLUSTER: Final = "xce:cluster"
PROVIDER: Final = "xce:provider"
OP_ID: Final = "xce:op_id"
EPOCH: Final = "xce:epoch"
TEMPLATE: Final = "xce:template"
PROTECT: Final = "xce:protect"
# Whole seconds from launch after which the cloud itself ends the instance (the backstop for an
# instance nobody remembers: the lease epoch cannot fence a partitioned old owner's cloud calls).
# Present only when the provider sets ``max_lifetime``; like the owner tags, no site template can
# drop it.
MAX_LIFETIME: Final = "xce:max_lifetime"
# ``warm`` while the instance waits stopped in its template's warm pool (orchestrator/model/pool.py);
# removed when demand takes it.
POOL: Final = "xce:pool"
# The offering the instance was launched as (orchestrator/model/offerings.py): its name.
OFFERING: Final = "xce:offering"

OWNER_TAGS: Final = (CLUSTER, PROVIDER, OP_ID, EPOCH, TEMPLATE)

# A bake's objects (docs/images.md): ``image`` or ``builder``, and what an image was built from.
KIND: Final = "xce:kind"
BUILT_FROM_IMAGE: Final = "xce:built-from-image"
ROLE_VERSION: Final = "xce:role-version"
NODE_MANAGER_SHA256: Final = "xce:node-manager-sha256"
SITE_ROLES: Final = "xce:site-roles"
IMAGE_TAGS: Final = (KIND, BUILT_FROM_IMAGE, ROLE_VERSION, NODE_MANAGER_SHA256, SITE_ROLES)

# Every tag the toolkit writes or reads back from the cloud: what a provider module's label map
# (orchestrator/model/labels.py) may put under other label keys and encodes the values of.
TOOLKIT_TAGS: Final = (*OWNER_TAGS, PROTECT, MAX_LIFETIME, POOL, OFFERING, *IMAGE_TAGS)

# The epoch tag value for a plan made without a lease (``xceprov plan`` previews).
NO_EPOCH: Final = "none"


def of_provider(tags: Mapping[str, str], provider: str) -> bool:
    """Whether an object of the cluster's tagged listing is counted under ``provider``.

    A module lists by ``xce:cluster`` alone, so one provider's listing holds every provider's
    objects on the same cloud. An object tagged for another provider is that provider's (its facts
    explain it; it is never untracked here). One with no ``xce:provider`` tag at all (not made by
    the toolkit, or its tags were edited) belongs to nobody, and stays in the listing of every
    provider that sees it, as evidence for the operator.
    """
    return tags.get(PROVIDER, "") in ("", provider)


def format_epoch(term: int, seq: int) -> str:
    """Render a lease epoch ``(term, seq)`` as the tag value ``<term>.<seq>``."""
    return f"{term}.{seq}"


_LIFETIME_PATTERN: Final = re.compile(r"^[1-9][0-9]{0,9}$")


def owner_tags(
    cluster: str, provider: str, op_id: str, epoch: str, template: str, max_lifetime: int | None = None
) -> dict[str, str]:
    """The owner tags of one instance, in a fixed order (``xce:max_lifetime`` last, when set)."""
    tags = {CLUSTER: cluster, PROVIDER: provider, OP_ID: op_id, EPOCH: epoch, TEMPLATE: template}
    if max_lifetime is not None:
        tags[MAX_LIFETIME] = format_max_lifetime(max_lifetime)
    return tags


def format_max_lifetime(seconds: int) -> str:
    """The ``xce:max_lifetime`` tag value: whole seconds, 1 to 10 digits, no sign or unit."""
    value = str(seconds)
    if not _LIFETIME_PATTERN.match(value):
        raise ValueError(f"max lifetime {seconds!r} is not a whole number of seconds from 1 to 9999999999")
    return value


def parse_max_lifetime(value: str) -> int:
    """Seconds of an ``xce:max_lifetime`` tag value; ValueError naming the value when malformed.

    The same rule as the modules' validation: 1 to 10 digits, no leading zero, sign, unit or
    space, so that every cloud reads the same lifetime from the same tag.
    """
    if not _LIFETIME_PATTERN.match(value):
        raise ValueError(f"{MAX_LIFETIME} {value!r} is not a whole number of seconds (1 to 10 digits)")
    return int(value)
