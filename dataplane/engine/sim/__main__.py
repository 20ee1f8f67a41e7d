"""``python -m dataplane.engine.sim`` is ``fleetplane engine-sim`` (SPEC §1)."""

from __future__ import annotations

from dataplane.engine.sim.service import main

if __name__ == "__main__":
    raise SystemExit(main())
