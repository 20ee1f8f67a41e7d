"""Control-plane load metrics (SPEC §8): frames by outcome, dropped frames, open subscriptions.

WatchLoads streams are counted in ``fleetplane_control_watchers{stream="loads"}``
(``controlplane.server.metrics``), next to the contract watchers.

Module-level collectors in the default prometheus registry, created once at import (a
second registration of the same name would raise), so several control planes in one test
process share them; values are cumulative per process.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from controlplane.load.table import FrameOutcome
from controlplane.server.metrics import WATCHERS

LOAD_FRAMES = Counter(
    "fleetplane_load_frames",
    "Load frames received from engine publishers, by outcome (ok, gap, restart, malformed).",
    ["outcome"],
)
LOAD_DROPPED_FRAMES = Counter(
    "fleetplane_load_dropped_frames",
    "Load frames lost to sequence gaps (frames the publisher sent that never arrived).",
)
LOAD_SUBSCRIPTIONS = Gauge("fleetplane_load_subscriptions", "ZMQ SUB sockets open (one per worker dp rank).")

# Resolved once: a labels() lookup per frame would cost more than the rest of the accounting.
FRAMES_BY_OUTCOME = {outcome: LOAD_FRAMES.labels(outcome=outcome.value) for outcome in FrameOutcome}
LOAD_WATCHERS = WATCHERS.labels("loads")
