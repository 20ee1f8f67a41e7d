#!/usr/bin/env bash
# Create .venv and install fleetplane with its development dependencies (idempotent).
# One line per step; pip runs quiet into a log that is shown only when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
started=$SECONDS
log="$(mktemp "${TMPDIR:-/tmp}/fleetplane-bootstrap.XXXXXX")"
trap 'rm -f "$log"' EXIT
step() { printf 'bootstrap: %s\n' "$*"; }
quietly() {
  if ! "$@" >"$log" 2>&1; then
    echo "bootstrap: failed: $*" >&2
    cat "$log" >&2
    exit 1
  fi
}
if [ ! -x .venv/bin/python ]; then
  step "creating .venv ($("$PYTHON" --version 2>&1))"
  quietly "$PYTHON" -m venv .venv
fi
step "upgrading pip"
quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
step "installing fleetplane (editable) with its development dependencies"
quietly .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
step "ready in $((SECONDS - started)) s: .venv/bin/fleetplane"
