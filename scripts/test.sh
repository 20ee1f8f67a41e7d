#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: unit, integration and end-to-end.
set -euo pipefail
cd "$(dirname "$0")/.."
# The plain form, the reference, even beside a compiled build (scripts/test_compiled.sh tests
# that one): every process the tests start inherits it (dataplane/form.py).
export FLEETPLANE_FORM=plain
./scripts/bootstrap.sh
./scripts/install_oracle.sh
./scripts/install_etcd.sh
./scripts/install_promtool.sh
./scripts/install_chromium.sh
# --durations=25: every run lists its 25 slowest tests, so a test that grows slow is seen.
exec .venv/bin/python -m pytest --durations=25 "$@"
