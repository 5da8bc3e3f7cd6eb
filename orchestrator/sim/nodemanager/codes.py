"""Exit statuses the simulated worker ends with and the node manager restarts by.

A module of their own because both ``worker`` (which exits with them) and ``manager`` (which
starts the worker and slows its restarts by them) need them. Standard library only, like every
runtime module of the artifact.
"""

from __future__ import annotations

EXIT_REFUSED = 3  # the worker's exit status when the controller refuses the join
EXIT_CONFIG = 78  # EX_CONFIG: the worker cannot run with this configuration
