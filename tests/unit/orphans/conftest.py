"""Make this directory's shared helpers (``orphan_support``) and ``tests/`` importable."""

from __future__ import annotations

import sys
from pathlib import Path

for _path in (Path(__file__).resolve().parent, Path(__file__).resolve().parents[2]):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))
