"""The workspace tests use the fake engine and test site in tests/tffake.py."""

from __future__ import annotations

import sys
from pathlib import Path

# --import-mode=importlib: the fake engine lives in tests/, beside the other shared helpers.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
