"""Make ``tests/`` importable: the shared helpers of the simulated controller live there."""

from __future__ import annotations

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[3])
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
