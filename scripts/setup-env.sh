#!/usr/bin/env bash
# Prepare this machine for `make demo` and `make test`: Debian packages when root, then the
# project's virtual environment with its test extras. Safe to run again; it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
DEBS=(openssh-server openssh-client netcat-openbsd iproute2 python3)
# Checked by the tests only: logrotate accepts contrib/logrotate/xceprov (skipped without it).
DEBS+=(logrotate)

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  missing=()
  for pkg in "${DEBS[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || echo "setup: apt-get update failed; trying the install anyway" >&2
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # The simulated hosts run their own sshd; the distribution's service must not hold port 22.
  if command -v systemctl >/dev/null && systemctl is-active --quiet ssh 2>/dev/null; then :; fi
else
  echo "setup: not root; skipping Debian packages (${DEBS[*]}); simulated hosts need root" >&2
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
echo "setup: installing the project and its test extras into $VENV"
"$VENV/bin/python" -m pip install -q -e '.[test]'
touch "$VENV/.installed"
