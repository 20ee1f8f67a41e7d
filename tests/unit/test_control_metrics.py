"""The control plane's state gauges: workers by freshness and routers by rollout state (SPEC §8)."""

from __future__ import annotations

from prometheus_client import REGISTRY, generate_latest

from controlplane.metrics import add_freshness_source, add_router_source


def _samples() -> dict[str, float]:
    lines = generate_latest(REGISTRY).decode().splitlines()
    picked = [
        line.rsplit(" ", 1)
        for line in lines
        if line.startswith(("fleetplane_load_workers", "fleetplane_control_router"))
    ]
    return {name: float(value) for name, value in picked}


def test_every_state_has_a_series_and_sources_add_up_until_removed() -> None:
    """All three freshness states and four rollout states are always exposed (0 when none); two
    sources (two control planes in one process) add up; a removed source counts no more."""
    base = _samples()
    assert base['fleetplane_load_workers{freshness="UNKNOWN"}'] >= 0
    assert 'fleetplane_control_routers{connected="false",up_to_date="false"}' in base
    undo = [
        add_freshness_source(lambda: {"FRESH": 2, "STALE": 1}),
        add_freshness_source(lambda: {"STALE": 1}),
        add_router_source(lambda: [("r1", 7, True, True), ("r2", 6, True, False), ("r3", 7, False, True)]),
    ]
    now = _samples()
    assert (
        now['fleetplane_load_workers{freshness="STALE"}']
        == base['fleetplane_load_workers{freshness="STALE"}'] + 2
    )
    assert (
        now['fleetplane_load_workers{freshness="FRESH"}']
        == base['fleetplane_load_workers{freshness="FRESH"}'] + 2
    )
    key = 'fleetplane_control_routers{connected="true",up_to_date="false"}'
    assert now[key] == base[key] + 1
    assert now['fleetplane_control_router_applied_revision{router="r2"}'] == 6
    for forget in undo:
        forget()
    assert _samples() == base
