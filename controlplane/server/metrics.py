"""Control-plane metrics (SPEC §8), registered once per process in the default registry."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

WATCHERS = Gauge("fleetplane_control_watchers", "Open watch streams, by stream", ["stream"])
CONTRACT_REVISION = Gauge("fleetplane_control_contract_revision", "Store revision of the live contract set")
CONTRACT_CHANGES = Counter(
    "fleetplane_control_contract_changes_total", "Contract versions written, by change kind", ["change"]
)
