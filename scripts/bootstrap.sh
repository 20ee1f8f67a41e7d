#!/usr/bin/env bash
# Create .venv and install fleetplane with its development dependencies (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
# The test oracle (tests/fakes/sglang_engine): SGLang's own request code, without its
# dependencies (torch, CUDA kernels); the few pure ones its request modules import are dev deps.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps sglang==0.5.23
