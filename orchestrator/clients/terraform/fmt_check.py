"""``python -m orchestrator.clients.terraform.fmt_check DIR...``: list unformatted Terraform files.

Prints each file ``terraform fmt`` would change (recursively, with the bundled engine) and
exits 1 if there is any, 0 if none (also when DIR holds no Terraform files at all), 2 when
DIR does not exist, and Terraform's error exit code with its one-line diagnostics when a
file does not parse.
"""

from __future__ import annotations

import sys
from pathlib import Path

from orchestrator.clients.terraform.engine import BundledEngine
from orchestrator.errors import XceprovError

_SUFFIXES = (".tf", ".tfvars", ".tftest.hcl")


def main(argv: list[str] | None = None) -> int:
    """Check every DIR given; return the process exit code."""
    args = sys.argv[1:] if argv is None else argv
    if not args or any(a.startswith("-") for a in args):
        print("usage: python -m orchestrator.clients.terraform.fmt_check DIR...", file=sys.stderr)
        return 2
    engine = BundledEngine()
    unformatted: list[str] = []
    for arg in args:
        path = Path(arg)
        if not path.exists():
            print(f"fmt_check: {arg}: no such file or directory", file=sys.stderr)
            return 2
        # Starting Terraform costs a fraction of a second; skip it when there is nothing to check.
        if path.is_dir() and not any(p.name.endswith(_SUFFIXES) for p in path.rglob("*") if p.is_file()):
            continue
        try:
            unformatted += engine.fmt_check(path)
        except XceprovError as err:
            print(err, file=sys.stderr)
            return err.exit_code
    for name in unformatted:
        print(name)
    return 1 if unformatted else 0


if __name__ == "__main__":
    sys.exit(main())
