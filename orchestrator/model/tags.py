"""Owner tags: the keys every cloud resource made by the toolkit carries.

They are how the toolkit proves a resource is its own: anything without this cluster's
``xce:cluster`` and the provider's ``xce:provider`` tag is never touched.
"""

from __future__ import annotations

from typing import Final

CLUSTER: Final = "xce:cluster"
PROVIDER: Final = "xce:provider"
OP_ID: Final = "xce:op_id"
EPOCH: Final = "xce:epoch"
TEMPLATE: Final = "xce:template"
PROTECT: Final = "xce:protect"

OWNER_TAGS: Final = (CLUSTER, PROVIDER, OP_ID, EPOCH, TEMPLATE)

# The epoch tag value for a plan made without a lease (``xceprov plan`` previews).
NO_EPOCH: Final = "none"


def format_epoch(term: int, seq: int) -> str:
    """Render a lease epoch ``(term, seq)`` as the tag value ``<term>.<seq>``."""
    return f"{term}.{seq}"


def owner_tags(cluster: str, provider: str, op_id: str, epoch: str, template: str) -> dict[str, str]:
    """The owner tags of one instance, in a fixed order."""
    return {CLUSTER: cluster, PROVIDER: provider, OP_ID: op_id, EPOCH: epoch, TEMPLATE: template}
