"""The named timeouts: one name each in configuration, log messages, audit entries and metrics.

A timeout that passes is reported under the configuration key that set it, so that an operator
reading ``join_deadline 900s passed`` in the log or ``timeout="join_deadline"`` on a metric knows
which key to look up (docs/configuration.md).
"""

from __future__ import annotations

from enum import StrEnum


class NamedTimeout(StrEnum):
    """Each value is the configuration key of the timeout (``providers.<name>.*`` or ``daemon.*``)."""

    JOIN_DEADLINE = "join_deadline"  # providers.<name>.join_deadline: an expected host that never joined
    DRAIN_TIMEOUT = "drain_timeout"  # providers.<name>.drain_timeout: a closing host that never drained
    IDLE_TIME = "idle_time"  # providers.<name>.idle_time: idle this long → reclaim candidate
    HOLD_TIME = "hold_time"  # providers.<name>.hold_time: kept at least this long once provisioned
    MAX_LIFETIME = "max_lifetime"  # providers.<name>.max_lifetime: drained and returned once this old
    STOP_TIMEOUT = "stop_timeout"  # daemon.stop_timeout: the SIGTERM bound for in-flight work
