#!/usr/bin/env bash
# Compile the router's hot modules (scripts/mypyc_modules.txt) with mypyc, in place: one .so
# next to each .py (Python imports an extension module before the source of the same name),
# their shared runtime dataplane/hot__mypyc.*.so, and dataplane/hot__mypyc.sources.json, the
# SHA-256 of each source compiled: dataplane/form.py runs the compiled form only while every
# source is the one compiled, else the plain source (all or nothing). The plain, interpreted form
# stays the reference (scripts/test.sh runs it with FLEETPLANE_FORM=plain). Everything built is
# gitignored; the C sources go to build/mypyc/.
#   scripts/build_mypyc.sh            build (≈ 4-5 min on 2 cores) unless the build is current,
#                                     then check that the .so are what gets imported
#   scripts/build_mypyc.sh --force    build even if current
#   scripts/build_mypyc.sh --no-profile
#                                     without the training run (≈ 2 min; for quick edits: the
#                                     code is the same, its layout is not profile-guided)
#   scripts/build_mypyc.sh --clean    back to the plain form
#
# The C is compiled twice (profile-guided, gcc's -fprofile-generate / -fprofile-use): once
# instrumented, then trained by the router's hot paths on in-memory transports (the rows of
# bench/router_instructions.py: h1 and h2c on either side, plain and streaming, the three
# dialects, the access log, the openai client's headers, four balanced workers), then again
# with the counts. gcc places the code that ran together, hot branches first, and everything
# the training never ran apart from it. bench/README.md, session 21: router CPU per request in
# memory −7.6 % (h1 → h1) and −11.5 % (h2c on either side), simulated I1 misses −8 %. Code the
# training missed is compiled as without a profile (-fprofile-partial-training): no slower.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python

clean() {
  find dataplane -name '*.cpython-*.so' -delete
  rm -rf build/mypyc dataplane/hot__mypyc.sources.json
}

force=0
profile=1
for arg in "$@"; do
  case "$arg" in
    --clean) clean; echo "mypyc: plain form (no compiled modules)"; exit 0 ;;
    --force) force=1 ;;
    --no-profile) profile=0 ;;
    *) echo "usage: scripts/build_mypyc.sh [--force] [--no-profile] | --clean" >&2; exit 2 ;;
  esac
done
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
if [ "$force" = 0 ] && current; then
  echo "mypyc: the compiled form is current (${#MODULES[@]} modules; --force rebuilds)"
  exit 0
fi
clean
# mypyc type-checks with the project's mypy settings (pyproject.toml, strict) before compiling.
# group_name: one shared library inside the package (dataplane/hot__mypyc), importable wherever
# dataplane is, instead of a hash-named one at the repository root.
PROFILE="$profile" "$PY" - "${MODULES[@]}" <<'PY'
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from mypyc.build import mypycify
from setuptools import setup

modules = sys.argv[1:]
# The sources' digests as mypyc reads them: a file edited while the build runs is then stale in
# the manifest (dataplane/form.py refuses it), never taken for the code compiled before the edit.
digests = {m: hashlib.sha256(Path(m).read_bytes()).hexdigest() for m in modules}
extensions = mypycify(modules, target_dir="build/mypyc", group_name="dataplane.hot")
# The shared library's functions call each other directly, not through its PLT, and the
# compiler may inline them into each other: nothing ever interposes them (the modules reach
# the library through a capsule); its calls into libpython go through the GOT, without a PLT
# stub. bench/README.md, session 20: -523 and -141 instructions per request on the router row,
# simulated I1 misses 3,194 -> 3,039.
# (A list of each extension's own: mypyc's extensions share one list of flags.)
base_compile = {id(e): [*e.extra_compile_args, "-fno-semantic-interposition", "-fno-plt"] for e in extensions}
base_link = {id(e): [*e.extra_link_args, "-Wl,-Bsymbolic-functions"] for e in extensions}


def build(flags: list[str]) -> None:
    for extension in extensions:
        extension.extra_compile_args = base_compile[id(extension)] + flags
        extension.extra_link_args = base_link[id(extension)] + flags
    setup(
        name="fleetplane-hot",
        ext_modules=extensions,
        script_args=[
            "--quiet",  # no line per gcc call; mypyc's type errors and gcc's errors still print
            "build_ext", "--inplace", "--force", "--build-temp", "build/mypyc/temp",
            "--build-lib", "build/mypyc/lib", "--parallel", str(os.cpu_count() or 1),
        ],
    )


def write_manifest() -> None:
    Path("dataplane/hot__mypyc.sources.json").write_text(json.dumps(digests, indent=1) + "\n")


if os.environ["PROFILE"] == "0":
    build([])
    write_manifest()
    sys.exit()
counts = str(Path("build/mypyc/profile").resolve())
rows = (
    "router", "responses", "generate", "router-4w", "router-log", "router-openai",
    "router-h2c", "h2c-router", "router-sse", "router-h2c-sse", "h2c-router-sse",
)
try:
    # -fprofile-update=single: the training runs one thread of compiled code.
    build([f"-fprofile-generate={counts}", "-fprofile-update=single"])
    write_manifest()  # the instrumented build is the compiled form while it trains, and only then
    try:
        for row in rows:
            subprocess.run(
                [sys.executable, "bench/router_instructions.py", "--inner", row, "--requests", "2000"],
                env={**os.environ, "FLEETPLANE_FORM": "compiled", "PYTHONHASHSEED": "0"},
                stdout=subprocess.DEVNULL,
                check=True,
            )
    finally:
        Path("dataplane/hot__mypyc.sources.json").unlink()
    print(f"mypyc: trained on {len(rows)} rows of bench/router_instructions.py", flush=True)
    # -Wno-missing-profile: the per-module shims run no code of their own worth a profile.
    build([f"-fprofile-use={counts}", "-fprofile-partial-training", "-Wno-missing-profile"])
except (SystemExit, subprocess.CalledProcessError) as failed:
    # A compiler without gcc's profile flags (or a training row that failed, which the compiled
    # tests then show): the same code, compiled without a profile.
    print(f"mypyc: the profile-guided build failed ({failed}): compiling without a profile", flush=True)
    build([])
write_manifest()
PY
FLEETPLANE_FORM=compiled "$PY" -m pytest -q -p no:cacheprovider tests/unit/test_compiled_form.py
echo "mypyc: compiled ${#MODULES[@]} modules in ${SECONDS} s"
