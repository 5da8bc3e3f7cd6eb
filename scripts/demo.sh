#!/usr/bin/env bash
# `make demo`: the whole story on the embedded simulated world (scripts/demo.py tells it).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
unset XCEPROV_CONFIG
exec python scripts/demo.py
