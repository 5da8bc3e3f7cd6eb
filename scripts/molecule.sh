#!/usr/bin/env bash
# Molecule scenarios of the shipped roles; they need simulated hosts, hence root.
set -euo pipefail
cd "$(dirname "$0")/.."
# Molecule calls ansible-config and ansible-playbook by name: the venv must be on PATH.
export PATH="$PWD/.venv/bin:$PATH"
if [ ! -d molecule/default ]; then
  echo "molecule: no scenario yet"; exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "molecule: skipped (simulated hosts need root)"; exit 0
fi
# default: the push; bake: the bake mode, then a push pass on a host started from its image.
cd molecule/.. && .venv/bin/molecule test -s default && .venv/bin/molecule test -s bake
