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
# -n 2 --dist loadfile: two workers (pytest-xdist), each test file whole on one of them, the few
# that share .venv's installed state as one unit (tests/conftest.py). Most of the suite waits on
# the processes it starts, so two files at a time take well under the serial time on two cores.
# -n 0 (given after these) runs the suite in this one process.
exec .venv/bin/python -m pytest -n 2 --dist loadfile --durations=25 "$@"
