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
# The router's hot modules compiled with mypyc (≈ 25-40 % less CPU per request, bench/README.md):
# the form users run. Skipped while current; where it cannot be built (no C compiler) the plain
# source runs, the same code (dataplane/form.py chooses at start; the router's start log says which).
if [ "${FLEETPLANE_FORM:-auto}" = "plain" ]; then
  step "not compiling the hot path (FLEETPLANE_FORM=plain)"
else
  step "compiling the hot path with mypyc, profile-guided (≈ 4-5 min, skipped while current)"
  if ./scripts/build_mypyc.sh >"$log" 2>&1; then
    step "$(tail -n 1 "$log")"
  else
    ./scripts/build_mypyc.sh --clean >/dev/null 2>&1 || true
    step "compiling failed, so the plain form runs (the same code); scripts/build_mypyc.sh said:"
    tail -n 3 "$log" | sed 's/^/  /'
  fi
fi
step "ready in $((SECONDS - started)) s: .venv/bin/fleetplane"
