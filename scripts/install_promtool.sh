#!/usr/bin/env bash
# The dashboards' and alert rules' tests run promtool (`check rules`, `test rules`). It is taken
# from Debian's prometheus package, unpacked into .ci/.tools/prometheus (promtool is a static
# binary): installing the package would also start a Prometheus server on every interface where
# systemd runs. Root or sudo is needed only to refresh apt's lists; where that is impossible,
# say so: those tests then skip, naming why.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v promtool >/dev/null 2>&1 && exit 0
DEST=.ci/.tools/prometheus
[ -x "$DEST/usr/bin/promtool" ] && exit 0
source scripts/apt.sh
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_promtool: no promtool and no apt-get: the dashboard and alert tests will be skipped" >&2
  exit 0
fi
privileged=1
apt_privilege || privileged=0
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && apt-get download -qq prometheus >/dev/null 2>&1); then
  if [ "$privileged" -eq 0 ]; then
    echo "install_promtool: no promtool and no root to refresh apt: run 'sudo apt-get update' to test the alert rules" >&2
    exit 0
  fi
  $SUDO apt-get update -qq
  (cd "$work" && apt-get download -qq prometheus >/dev/null)
fi
mkdir -p "$DEST"
dpkg-deb -x "$work"/prometheus_*.deb "$DEST"
"$DEST/usr/bin/promtool" --version >/dev/null
