#!/usr/bin/env bash
# The etcd store's tests run a real etcd (Debian's etcd-server package). Install it when absent,
# as root or through sudo; where that is impossible, say so: those tests then skip, naming why.
set -euo pipefail
command -v etcd >/dev/null 2>&1 && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_etcd: no etcd and no apt-get: the etcd store's tests will be skipped" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "install_etcd: no etcd and no root: run 'sudo apt-get install etcd-server' to test the etcd store" >&2
    exit 0
  fi
fi
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
