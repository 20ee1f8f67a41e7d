"""``python -m controlplane`` is ``fleetplane control`` (SPEC §1)."""

from __future__ import annotations

import sys

from controlplane.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main(["control", *sys.argv[1:]]))
