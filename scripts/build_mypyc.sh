#!/usr/bin/env bash
# Compile the router's hot modules (scripts/mypyc_modules.txt) with mypyc, in place: one .so
# next to each .py (Python imports an extension module before the source of the same name),
# their shared runtime dataplane/hot__mypyc.*.so, and dataplane/hot__mypyc.sources.json, the
# SHA-256 of each source compiled: dataplane/form.py runs the compiled form only while every
# source is the one compiled, else the plain source (all or nothing). The plain, interpreted form
# stays the reference (scripts/test.sh runs it with FLEETPLANE_FORM=plain). Everything built is
# gitignored; the C sources go to build/mypyc/.
#   scripts/build_mypyc.sh            build (≈ 1-2.5 min on 2 cores) unless the build is current,
#                                     then check that the .so are what gets imported
#   scripts/build_mypyc.sh --force    build even if current
#   scripts/build_mypyc.sh --clean    back to the plain form
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

clean() {
  find dataplane -name '*.cpython-*.so' -delete
  rm -rf build/mypyc dataplane/hot__mypyc.sources.json
}

if [ "${1:-}" = "--clean" ]; then
  clean
  echo "mypyc: plain form (no compiled modules)"
  exit 0
fi
mapfile -t MODULES < <(grep -v -e '^#' -e '^$' scripts/mypyc_modules.txt)
# Current: the compiled form imports (every source is the one compiled) and it is this list's.
current() {
  FLEETPLANE_FORM=compiled "$PY" - "${MODULES[@]}" <<'PY' 2>/dev/null
import json
import sys

import dataplane  # raises ImportError unless the build is current (dataplane/form.py)
from dataplane.form import MANIFEST

sys.exit(0 if set(json.loads(MANIFEST.read_text())) == set(sys.argv[1:]) else 1)
PY
}
if [ "${1:-}" != "--force" ] && current; then
  echo "mypyc: the compiled form is current (${#MODULES[@]} modules; --force rebuilds)"
  exit 0
fi
clean
# mypyc type-checks with the project's mypy settings (pyproject.toml, strict) before compiling.
# group_name: one shared library inside the package (dataplane/hot__mypyc), importable wherever
# dataplane is, instead of a hash-named one at the repository root.
"$PY" - "${MODULES[@]}" <<'PY'
import os
import sys

from mypyc.build import mypycify
from setuptools import setup

extensions = mypycify(sys.argv[1:], target_dir="build/mypyc", group_name="dataplane.hot")
# The shared library's functions call each other directly, not through its PLT, and the
# compiler may inline them into each other: nothing ever interposes them (the modules reach
# the library through a capsule); its calls into libpython go through the GOT, without a PLT
# stub. bench/README.md, session 20: -523 and -141 instructions per request on the router row,
# simulated I1 misses 3,194 -> 3,039.
for extension in extensions:
    extension.extra_compile_args += ["-fno-semantic-interposition", "-fno-plt"]
    extension.extra_link_args += ["-Wl,-Bsymbolic-functions"]
setup(
    name="fleetplane-hot",
    ext_modules=extensions,
    script_args=[
        "--quiet",  # no line per gcc call; mypyc's type errors and gcc's errors still print
        "build_ext", "--inplace", "--build-temp", "build/mypyc/temp", "--build-lib", "build/mypyc/lib",
        "--parallel", str(os.cpu_count() or 1),
    ],
)
PY
"$PY" - "${MODULES[@]}" <<'PY'
import hashlib
import json
import sys
from pathlib import Path

digests = {m: hashlib.sha256(Path(m).read_bytes()).hexdigest() for m in sys.argv[1:]}
Path("dataplane/hot__mypyc.sources.json").write_text(json.dumps(digests, indent=1) + "\n")
PY
FLEETPLANE_FORM=compiled "$PY" -m pytest -q -p no:cacheprovider tests/unit/test_compiled_form.py
echo "mypyc: compiled ${#MODULES[@]} modules in ${SECONDS} s"
