#!/usr/bin/env bash
# `make demo`: the main job on the embedded simulated world, start to finish.
# Simulated world up, a burst previewed as a Terraform plan, applied, listed with its owner tags,
# hosts bootstrapped and joined (as root), work arrives and a second burst covers it, hosts given
# back, world down.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
unset XCEPROV_CONFIG
BUNDLE=.xceprov/demo-burst

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() { xceprov destroy --all --force --max 100 >/dev/null 2>&1 || true; xceprov sim down >/dev/null 2>&1 || true; }
trap cleanup EXIT

step "xceprov validate: configuration, host templates, Terraform modules, playbooks"
xceprov validate

step "xceprov sim up: simulated controller, cloud and hosts"
xceprov sim up

step "xceprov plan cpu=3 gpu=1: what the burst would create and cost (nothing changes)"
rm -rf "$BUNDLE"
xceprov plan cpu=3 gpu=1 --out "$BUNDLE"

step "xceprov apply: exactly the saved plan"
xceprov apply "$BUNDLE"

step "xceprov sim cloud list: the instances, with their owner tags"
xceprov sim cloud list

if [ "$(id -u)" = 0 ]; then
  step "xceprov bootstrap: Ansible installs the node manager with the worker role over SSH"
  xceprov bootstrap

  step "xceprov status: the workers joined the controller by themselves"
  xceprov status

  step "xceprov sim submit: work needing 5 cpu hosts arrives; demand rises by the missing 2"
  xceprov sim submit --template cpu --hosts 5 --duration 120s
  sleep 1
  xceprov status | sed -n '/demand vs supply/,/^$/p'

  step "a second burst covers the gap (the reconcile daemon, next, will do this by itself)"
  rm -rf "$BUNDLE-2"
  xceprov plan cpu=2 --out "$BUNDLE-2"
  xceprov apply "$BUNDLE-2"
  # Bootstrapping every host again is safe: the first three report no change.
  xceprov bootstrap 2>.xceprov/demo-bootstrap-2.log
  for _ in $(seq 1 60); do
    xceprov status --json | python3 -c 'import json, sys
cpu = [t for t in json.load(sys.stdin)["demand"] if t["template"] == "cpu"]
sys.exit(0 if cpu and cpu[0]["busy"] >= 5 else 1)' && break
    sleep 1
  done
  xceprov status | sed -n '/demand vs supply/,/^$/p'
else
  echo "demo: not root, so no simulated hosts: bootstrap and joins are skipped (see README)"
fi

step "xceprov destroy --all --force: give the hosts back, busy ones too (audited; xceprov return drains first)"
xceprov destroy --all --force

step "xceprov sim down: nothing left running"
xceprov sim down
trap - EXIT
echo
echo "demo: done. The audit log is .xceprov/audit.log; try: xceprov plan cpu=20 gpu=2"
