#!/usr/bin/env bash
# Compile the router's hot modules (scripts/mypyc_modules.txt) with mypyc, in place: one .so
# next to each .py (Python imports an extension module before the source of the same name),
# plus their shared runtime dataplane/hot__mypyc.*.so. The plain, interpreted form stays the
# reference: `scripts/build_mypyc.sh --clean` deletes every .so again (gitignored, never
# committed). The C sources go to build/mypyc/ (gitignored).
#   scripts/build_mypyc.sh            build (≈ 1.5-2.5 min on 2 cores), then checks the .so are imported
#   scripts/build_mypyc.sh --clean    back to the plain form
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

clean() {
  find dataplane -name '*.cpython-*.so' -delete
  rm -rf build/mypyc
}

if [ "${1:-}" = "--clean" ]; then
  clean
  echo "mypyc: plain form (no compiled modules)"
  exit 0
fi
clean
mapfile -t MODULES < <(grep -v -e '^#' -e '^$' scripts/mypyc_modules.txt)
# mypyc type-checks with the project's mypy settings (pyproject.toml, strict) before compiling.
# group_name: one shared library inside the package (dataplane/hot__mypyc), importable wherever
# dataplane is, instead of a hash-named one at the repository root.
"$PY" - "${MODULES[@]}" <<'PY'
import os
import sys

from mypyc.build import mypycify
from setuptools import setup

setup(
    name="fleetplane-hot",
    ext_modules=mypycify(sys.argv[1:], target_dir="build/mypyc", group_name="dataplane.hot"),
    script_args=[
        "--quiet",  # no line per gcc call; mypyc's type errors and gcc's errors still print
        "build_ext", "--inplace", "--build-temp", "build/mypyc/temp", "--build-lib", "build/mypyc/lib",
        "--parallel", str(os.cpu_count() or 1),
    ],
)
PY
FLEETPLANE_COMPILED=1 "$PY" -m pytest -q -p no:cacheprovider tests/unit/test_compiled_form.py
