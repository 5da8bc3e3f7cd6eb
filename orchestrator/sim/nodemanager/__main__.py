"""``python -m <package> [run|worker] ...``: the node manager, or its worker role."""

from __future__ import annotations

import sys

from .manager import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
