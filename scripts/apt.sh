# Sourced by scripts/install_*.sh: Debian packages for the tests that need a real tool, installed
# as root or through passwordless sudo. Where that is impossible the script says so and exits 0:
# those tests then skip, naming why (CI runs as root).

# apt_privilege: SUDO="" as root, "sudo -n" with passwordless sudo; fails without either.
apt_privilege() {
  SUDO=""
  [ "$(id -u)" -eq 0 ] && return 0
  sudo -n true 2>/dev/null || return 1
  SUDO="sudo -n"
}

# apt_install SCRIPT PACKAGE WHAT: install PACKAGE, or say why not and that WHAT will be skipped.
apt_install() {
  local script=$1 package=$2 what=$3
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "$script: no apt-get to install $package: $what will be skipped" >&2
    exit 0
  fi
  if ! apt_privilege; then
    echo "$script: no root to install $package: run 'sudo apt-get install $package' for $what" >&2
    exit 0
  fi
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
}
