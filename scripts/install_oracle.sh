#!/usr/bin/env bash
# The test oracle (tests/fakes/sglang_engine): SGLang's own request code, without its
# dependencies (torch, CUDA kernels); the few pure ones its request modules import are dev deps.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps sglang==0.5.23
