#!/usr/bin/env bash
# Prepare this machine for `make demo` and `make test`: Debian packages when root, then the
# project's virtual environment with its test extras. Safe to run again; it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
DEBS=(openssh-server openssh-client netcat-openbsd iproute2 python3)
# systemd-analyze and systemd-sysusers check the shipped unit (tests/unit/daemon/test_daemon_systemd.py).
# Only its tools are used; it does not become this machine's init (that is systemd-sysv's job).
DEBS+=(systemd)
# Checked by the tests only: logrotate accepts contrib/logrotate/xceprov (skipped without it).
DEBS+=(logrotate)
# The tests of several orchestrators start a private throw-away PostgreSQL server from these
# binaries (tests/pg_server.py); the cluster the package makes is not used.
DEBS+=(postgresql)
# docs/quickstart.md picks values out of --json output with jq (tests/integration/test_quickstart.py runs it).
DEBS+=(jq)

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
  # promtool checks a scrape of a running daemon (tests/integration/test_daemon.py) and the shipped
  # alert rules (tests/integration/test_monitoring.py). Debian ships
  # it only in the prometheus package (19 MB, no other package provides it); the server that
  # package would start is not wanted here.
  if ! command -v promtool >/dev/null; then
    echo "setup: installing Debian package prometheus (for promtool)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null || echo "setup: apt-get update failed; trying the install anyway" >&2
    apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 prometheus >/dev/null \
      || echo "setup: prometheus not installed; the promtool test will be skipped" >&2
    if command -v systemctl >/dev/null && systemctl is-enabled --quiet prometheus 2>/dev/null; then
      systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
  fi
else
  echo "setup: not root; skipping Debian packages (${DEBS[*]}); simulated hosts need root" >&2
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
echo "setup: installing the project and its test extras into $VENV (versions of constraints.txt)"
# constraints.txt pins what `make test` ran with (scripts/freeze-constraints.sh). A machine where a
# pinned version cannot install (another Python, another platform) still gets an environment,
# from the ranges of pyproject.toml; tests/unit/test_constraints.py then names what differs.
if ! "$VENV/bin/python" -m pip install -q -c constraints.txt -e '.[test]'; then
  echo "setup: the pinned versions did not install; installing from pyproject.toml's ranges" >&2
  "$VENV/bin/python" -m pip install -q -e '.[test]'
fi
touch "$VENV/.installed"
