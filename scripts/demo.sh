#!/usr/bin/env bash
# `make demo`: the main job on the embedded simulated world, start to finish.
# Simulated world up, a burst previewed as a Terraform plan, applied, hosts bootstrapped and
# joined (as root), listed with their owner tags, given back, world down.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
unset XCEPROV_CONFIG
BUNDLE=.xceprov/demo-burst

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
cleanup() { xceprov destroy --all --max 100 >/dev/null 2>&1 || true; xceprov sim down >/dev/null 2>&1 || true; }
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

if xceprov bootstrap --help >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  step "xceprov bootstrap: Ansible installs the node manager with the worker role over SSH"
  xceprov bootstrap
fi
if xceprov status --help >/dev/null 2>&1; then
  step "xceprov status: controller link, leases, demand and supply"
  xceprov status || true
fi

step "xceprov destroy --all: give the hosts back (audited)"
xceprov destroy --all

step "xceprov sim down: nothing left running"
xceprov sim down
trap - EXIT
echo
echo "demo: done. The audit log is .xceprov/audit.log; try: xceprov plan cpu=20 gpu=2"
