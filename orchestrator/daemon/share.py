"""Which providers a daemon asks leases for when several daemons share one database (docs/daemon.md).

The rule (docs/daemon.md, "Several daemons: providers split by lease"), computed by every live
member from the same members table, so every member reaches the same answer without talking to
the others:

- The input is the live members (a heartbeat younger than :func:`live_window`: two thirds of the
  lease TTL, two heartbeat intervals at their longest) and the providers each one is configured for.
- Providers are grouped by the members configuring them. Within a group, the providers in sorted
  order are dealt round-robin over the group's members sorted by instance id: provider ``i`` goes
  to member ``i mod L``. So for the usual case, every member configured alike, each member gets
  ⌊P/L⌋ or ⌈P/L⌉ of the P providers (the lower ranks get the extra ones); a provider only one
  member configures is that member's; a provider two of three configure is dealt between those two.
- What moves when a member comes or goes: the deal is by rank, so every provider whose index
  ``i mod L`` names another member afterwards moves. A member joining with the highest instance id
  takes over only providers from the end of the deal (4 providers over 2 → 3 members moves 2: the
  third's one and one of the first's), one joining with a lower id shifts the ranks after it and
  can move every provider of the group. Moves cost a clean release between passes and an acquire.

The controller's lease stays the only fence: two members that briefly disagree (one saw a
heartbeat the other did not yet) both ask, and the controller grants one of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.model.members import live_window

__all__ = ["deal", "dealt", "live_window"]


def deal(providers_by_member: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Every provider some member is configured for, to the member it is dealt to."""
    configuring: dict[str, list[str]] = {}
    for member in sorted(providers_by_member):
        for provider in sorted(set(providers_by_member[member])):
            configuring.setdefault(provider, []).append(member)  # members in sorted order
    groups: dict[tuple[str, ...], list[str]] = {}
    for provider in sorted(configuring):
        groups.setdefault(tuple(configuring[provider]), []).append(provider)
    owner: dict[str, str] = {}
    for members, providers in groups.items():
        for i, provider in enumerate(providers):
            owner[provider] = members[i % len(members)]
    return owner


def dealt(providers_by_member: Mapping[str, Sequence[str]], me: str) -> set[str]:
    """The providers dealt to ``me`` among the live members ``providers_by_member`` (member ->
    its configured providers); empty when ``me`` is not among them."""
    return {provider for provider, member in deal(providers_by_member).items() if member == me}
