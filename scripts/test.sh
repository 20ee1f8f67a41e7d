#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: unit, integration and end-to-end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
# The test oracle (tests/fakes/sglang_engine): SGLang's own request code, without its
# dependencies (torch, CUDA kernels); the few pure ones its request modules import are dev deps.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps sglang==0.5.23
./scripts/install_etcd.sh
./scripts/install_promtool.sh
./scripts/install_chromium.sh
# --durations=25: every run lists its 25 slowest tests, so a test that grows slow is seen.
exec .venv/bin/python -m pytest --durations=25 "$@"
