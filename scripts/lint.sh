#!/usr/bin/env bash
# ruff, ruff format, mypy (strict, package code), buf lint, and the freshness of generated code and docs.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/bootstrap.sh
if [ ! -x .ci/.tools/node_modules/.bin/buf ]; then
  npm install --silent --no-audit --no-fund --prefix .ci/.tools @bufbuild/buf@1.75.0 >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.ci/.tools/node_modules/.bin/buf lint
.venv/bin/python scripts/gen_proto.py --check
.venv/bin/python scripts/gen_docs.py --check
echo "lint: ok"
