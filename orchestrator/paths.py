"""Where the toolkit's own files are: the checkout that holds ``orchestrator/``.

The toolkit runs from its checkout (like Kubespray): ``terraform/``, ``templates/`` and
``ansible/`` sit next to the package and are read from there.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import FinalError


def toolkit_root() -> Path:
    """The directory holding ``terraform/``, ``templates/`` and ``ansible/``."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "terraform").is_dir() or not (root / "templates").is_dir():
        raise FinalError(f"{root}: not a toolkit checkout (no terraform/ or templates/ beside the package)")
    return root
