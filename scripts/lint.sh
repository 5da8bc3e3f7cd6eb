#!/usr/bin/env bash
# The linters that keep the code honest; `make test` runs them before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin

echo "lint: ruff"
$BIN/ruff check orchestrator tests bench
echo "lint: ruff format --check"
$BIN/ruff format --check orchestrator tests bench
echo "lint: mypy"
$BIN/mypy orchestrator
echo "lint: import layers"
$BIN/lint-imports
echo "lint: terraform fmt -check"
$BIN/python -m orchestrator.clients.terraform.fmt_check terraform
if [ -d ansible/roles ] && [ -n "$(ls -A ansible/roles 2>/dev/null)" ]; then
  echo "lint: ansible-lint (production profile)"
  (cd ansible && ../$BIN/ansible-lint --profile production -q)
  echo "lint: ansible-lint of the example site (production profile)"
  (cd examples/site && ../../$BIN/ansible-lint --profile production -q)
fi
