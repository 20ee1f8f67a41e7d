#!/usr/bin/env bash
# CI's compiled-form step: build the hot modules with mypyc unless the build is current
# (scripts/build_mypyc.sh), then run the HTTP server and router tests against them (unit, with
# the differential tests against the engine's own code; the HTTP server's integration tests; the
# e2e core: h1, h2c, streaming, contract). FLEETPLANE_FORM=compiled: dataplane refuses to import
# unless every hot module is its current .so (dataplane/form.py), and the e2e tests' routers
# inherit it. The build stays: it is the form `fleetplane up` runs; scripts/test.sh tests the
# plain form beside it (the reference). ≈ 3 min on 2 cores, the build included. Two workers, each
# file whole on one (as scripts/test.sh, tests/conftest.py). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_oracle.sh
./scripts/build_mypyc.sh
FLEETPLANE_FORM=compiled .venv/bin/python -m pytest -p no:cacheprovider -n 2 --dist loadfile "$@" \
  tests/unit/test_compiled_form.py tests/unit/http tests/unit/router \
  tests/integration/http \
  tests/e2e/router/test_forwarding.py tests/e2e/router/test_h2c.py tests/e2e/router/test_streaming.py \
  tests/e2e/router/test_contract.py tests/e2e/router/test_http1.py
