#!/usr/bin/env bash
# The status page's browser test renders it in a real headless Chromium (Debian's chromium
# package). Install it when absent, as root or through sudo; where that is impossible, say so: the
# test then skips, naming why (CI sets FLEETPLANE_REQUIRE_BROWSER, so there it fails instead).
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
command -v chromium-browser >/dev/null 2>&1 && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_chromium: no chromium and no apt-get: the status page's browser test will be skipped" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "install_chromium: no chromium and no root: run 'sudo apt-get install chromium' to test the status page in a browser" >&2
    exit 0
  fi
fi
echo "install_chromium: installing Debian's chromium (once; about 100 MB)" >&2
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
