"""The load range next to a replay endpoint (SPEC §7): the resolver an engine embeds, called directly.

engine-sim has no flag for the replay range (SPEC §1), so these rules cannot be reached through
the process; the acceptance tests of ``--load-publish-endpoint`` are in tests/e2e/engine."""

from __future__ import annotations

import pytest

from dataplane.engine.endpoints import resolve_load_pub_range


@pytest.mark.parametrize(
    ("mode", "kv", "replay", "dp", "expected"),
    [
        ("auto", "tcp://*:6000", None, 2, 6002),
        ("auto", "tcp://*:6000", "tcp://*:6002", 2, 6004),  # replay sits on kv + dp: moved past it
        ("auto", "tcp://*:6000", "tcp://*:6003", 2, 6005),  # partial overlap moves it too
        ("auto", "tcp://*:6000", "tcp://*:6004", 2, 6002),  # adjacent, no overlap
        ("tcp://*:7000", "tcp://*:6000", "tcp://*:6100", 2, 7000),
        ("tcp://0.0.0.0:7000", "tcp://*:6000", None, 1, 7000),
    ],
)
def test_resolver_ranges_with_a_replay_endpoint(
    mode: str, kv: str, replay: str | None, dp: int, expected: int
) -> None:
    """What an engine with a replay endpoint gets: auto moves past the replay range."""
    got, reason = resolve_load_pub_range(
        kv_endpoint=kv, replay_endpoint=replay, dp_size=dp, load_publish_endpoint=mode
    )
    assert reason is None and got is not None and got.base == expected
    assert got.dp_size == dp


@pytest.mark.parametrize("explicit", ["tcp://*:6100", "tcp://*:6099", "tcp://*:6101"])
def test_resolver_refuses_an_explicit_range_over_the_replay_range(explicit: str) -> None:
    """An explicit range that shares a port with the replay range is refused with a reason."""
    got, reason = resolve_load_pub_range(
        kv_endpoint="tcp://*:6000", replay_endpoint="tcp://*:6100", dp_size=2, load_publish_endpoint=explicit
    )
    assert got is None and reason is not None and "replay" in reason
