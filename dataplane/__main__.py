"""``python -m dataplane`` is ``fleetplane router`` (SPEC §1)."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    print("fleetplane router: not built yet", file=sys.stderr)
    raise SystemExit(2)
