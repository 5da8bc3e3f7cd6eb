"""Mitogen's linear strategy with Mitogen's CPU pinning turned off: ``ansible.strategy: mitogen_linear``.

Loaded by ``ansible-playbook`` (the runner puts this directory, then Mitogen's own strategy
directory, on ``ANSIBLE_STRATEGY_PLUGINS``), never imported by the orchestrator.

Mitogen pins its processes to CPUs (``ansible_mitogen.affinity``): on a machine of two or three
CPUs its connection multiplexer gets CPU 0 to itself, and the top-level process, every worker and
every ssh client it starts share the other CPUs, so the control side of a play runs on one CPU
of two while the multiplexer uses a few per cent of the other (measured in docs/performance.md,
"Bootstrap": half the machine idle during every task whose work is the control side's, a 20-host
bootstrap 26 s pinned against 21 s unpinned, a 100-host one 132 s against 104 s). Mitogen's own
no-op policy, put in place when this module is imported (before the strategy runs, so before
the multiplexer and the workers are forked from this process), leaves placement to the kernel.
"""

from __future__ import annotations

import ansible_mitogen.affinity
from ansible_mitogen.plugins.strategy.mitogen_linear import StrategyModule as MitogenLinear

ansible_mitogen.affinity.policy = ansible_mitogen.affinity.Policy()


class StrategyModule(MitogenLinear):  # type: ignore[misc]  # Mitogen ships no type information
    """Mitogen's own ``mitogen_linear``, with no CPU pinning."""
