#!/usr/bin/env bash
# The etcd store's tests run a real etcd (Debian's etcd-server package), installed here when
# absent (scripts/apt.sh); without it those tests skip, naming why.
set -euo pipefail
source "$(dirname "$0")/apt.sh"
command -v etcd >/dev/null 2>&1 && exit 0
apt_install install_etcd etcd-server "the etcd store's tests"
