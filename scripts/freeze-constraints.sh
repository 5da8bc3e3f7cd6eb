#!/usr/bin/env bash
# Write constraints.txt: the version of every package in .venv, the versions `make test` ran with.
# Run it after changing a dependency in pyproject.toml and installing it (scripts/setup-env.sh);
# tests/unit/test_constraints.py fails while the file and .venv differ. Sites install with
# `pip install -c constraints.txt ...` (contrib/systemd/README.md); scripts/setup-env.sh does too.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
{
  echo "# The versions \`make test\` ran with (Python $("$VENV/bin/python" -c 'import platform; print(platform.python_version())'), Linux)."
  echo "# Written by scripts/freeze-constraints.sh; do not edit by hand. Use: pip install -c constraints.txt ..."
  "$VENV/bin/python" -m pip freeze --exclude-editable --exclude xce-provisioner
} > constraints.txt
echo "constraints.txt: $(grep -c '==' constraints.txt) packages"
