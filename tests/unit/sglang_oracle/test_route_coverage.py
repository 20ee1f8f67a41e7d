"""Every route of the real engine's table that carries a sampling field is judged by the router (SPEC §5.1)."""

from __future__ import annotations

import pytest

from dataplane.router.contract.routes import build_route_table
from tests.fakes import sglang_engine as engine

pytestmark = pytest.mark.skipif(not engine.WHEEL_INSTALLED, reason=engine.SKIP_REASON)


def test_every_engine_sampling_route_is_judged() -> None:
    """A POST/PUT route of the 0.5.23 wheel whose body carries a §2 field has a dialect (a path
    the router does not list is refused: default-deny), for that method."""
    table = build_route_table()
    for route in engine.sampling_routes():
        assert route.path is not None, route  # a route only an environment variable places
        ours = table.lookup(route.path.encode())
        assert ours is not None and ours.dialect is not None and route.method.encode() in ours.methods, route


def test_each_dialect_carries_exactly_the_fields_the_engine_reads_there() -> None:
    """A field the router injects where the engine does not read it would leave the engine's
    default in force; one the engine reads that the router does not judge would pass unjudged."""
    table = build_route_table()
    for route in engine.sampling_routes():
        assert route.path is not None
        ours = table.lookup(route.path.encode())
        assert ours is not None and ours.dialect is not None
        assert set(ours.dialect.carried) == set(route.sampling_fields), (route, ours.dialect)


def test_routes_forwarded_unjudged_sample_nothing_in_the_engine() -> None:
    """Every path the router forwards unjudged is one where the engine samples no token."""
    sampling = {(r.method, r.path) for r in engine.sampling_routes()}
    served = {r.path for r in engine.engine_routes()}
    for ours in build_route_table().routes:
        if ours.dialect is None:
            path = ours.path.replace("{id}", "{response_id}")
            assert path in served, ours  # a real engine route, not a guess
            assert not {(m.decode(), path) for m in ours.methods} & sampling, ours
