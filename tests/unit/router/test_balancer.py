"""Balancing policies over candidate workers (pure; SPEC §1 --policy)."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from dataplane.router.balancer import Balancer, Policy


def test_round_robin_cycles_through_candidates() -> None:
    """round_robin visits every candidate in turn."""
    b: Balancer[str] = Balancer(Policy.ROUND_ROBIN, lambda w: 0)
    picks = [b.pick(["a", "b", "c"]) for _ in range(6)]
    assert Counter(picks) == {"a": 2, "b": 2, "c": 2}
    assert picks[:3] == picks[3:]


def test_least_load_picks_the_least_loaded() -> None:
    """least_load always picks the candidate with the smallest load."""
    loads = {"a": 3, "b": 1, "c": 2}
    b: Balancer[str] = Balancer(Policy.LEAST_LOAD, loads.__getitem__)
    assert {b.pick(["a", "b", "c"]) for _ in range(10)} == {"b"}


def test_least_load_rotates_between_equal_loads() -> None:
    """An idle fleet (equal loads) still spreads requests over every worker."""
    b: Balancer[str] = Balancer(Policy.LEAST_LOAD, lambda w: 0)
    picks = Counter(b.pick(["a", "b"]) for _ in range(10))
    assert picks == {"a": 5, "b": 5}


def test_power_of_two_never_picks_the_most_loaded_of_three() -> None:
    """power_of_two compares two distinct candidates, so the strictly worst one never wins."""
    loads = {"a": 0, "b": 5, "c": 9}
    b: Balancer[str] = Balancer(Policy.POWER_OF_TWO, loads.__getitem__, rng=random.Random(1))
    picks = Counter(b.pick(["a", "b", "c"]) for _ in range(300))
    assert picks["c"] == 0
    assert picks["a"] > picks["b"] > 0


def test_single_candidate_is_returned() -> None:
    """With one candidate every policy returns it."""
    for policy in Policy:
        b: Balancer[str] = Balancer(policy, lambda w: 0)
        assert b.pick(["only"]) == "only"


@given(
    loads=st.lists(st.integers(0, 100), min_size=1, max_size=8),
    policy=st.sampled_from(list(Policy)),
    seed=st.integers(0, 1000),
)
def test_pick_is_always_a_candidate(loads: list[int], policy: Policy, seed: int) -> None:
    """Every policy returns one of the candidates it was given; least_load returns a minimum."""
    names = [f"w{i}" for i in range(len(loads))]
    load_of = dict(zip(names, loads, strict=True)).__getitem__
    b: Balancer[str] = Balancer(policy, load_of, rng=random.Random(seed))
    picked = b.pick(names)
    assert picked in names
    if policy is Policy.LEAST_LOAD:
        assert load_of(picked) == min(loads)
