#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: unit, integration and end-to-end.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
./scripts/install_etcd.sh
exec .venv/bin/python -m pytest "$@"
