#!/usr/bin/env bash
# The status page's browser test renders it in a real headless Chromium (Debian's chromium
# package), installed here when absent (scripts/apt.sh); without it the test skips, naming why
# (CI sets FLEETPLANE_REQUIRE_BROWSER, so there it fails instead).
set -euo pipefail
source "$(dirname "$0")/apt.sh"
command -v chromium >/dev/null 2>&1 && exit 0
command -v chromium-browser >/dev/null 2>&1 && exit 0
echo "install_chromium: installing Debian's chromium (once; about 100 MB)" >&2
apt_install install_chromium chromium "the status page's browser test"
