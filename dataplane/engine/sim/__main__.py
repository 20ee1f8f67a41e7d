"""``python -m dataplane.engine.sim`` is ``fleetplane engine-sim`` (SPEC §1)."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    print("fleetplane engine-sim: not built yet", file=sys.stderr)
    raise SystemExit(2)
