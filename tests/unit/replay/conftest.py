"""The replay tests share the fake engine's site and in-memory controller (tests/tffake.py)."""

from __future__ import annotations

import sys
from pathlib import Path

# --import-mode=importlib: the shared helpers live in tests/.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
