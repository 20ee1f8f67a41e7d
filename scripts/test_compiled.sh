#!/usr/bin/env bash
# CI's compiled-form step: build the hot modules with mypyc (scripts/build_mypyc.sh), run the
# HTTP server and router tests against them (unit, with the differential tests against the
# engine's own code; the HTTP server's integration tests; the e2e core: h1, h2c, streaming,
# contract), then go back to the plain form, which the main test run uses (the
# reference). ≈ 3 min on 2 cores. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_oracle.sh
trap './scripts/build_mypyc.sh --clean' EXIT
./scripts/build_mypyc.sh
# FLEETPLANE_COMPILED=1: tests/unit/test_compiled_form.py checks that every hot module is the .so.
FLEETPLANE_COMPILED=1 .venv/bin/python -m pytest -p no:cacheprovider "$@" \
  tests/unit/test_compiled_form.py tests/unit/http tests/unit/router \
  tests/integration/http \
  tests/e2e/router/test_forwarding.py tests/e2e/router/test_h2c.py tests/e2e/router/test_streaming.py \
  tests/e2e/router/test_contract.py tests/e2e/router/test_http1.py
