"""Balancing policies over candidate workers and the predicted-wait score (pure; SPEC §1 --policy)."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.router.balancer import (
    FREE_SLOT_WEIGHT,
    Balancer,
    Policy,
    Scored,
    held_work,
    predicted_wait,
    request_work,
    wait_terms,
)


class Named(Scored):
    """A candidate with a name and fixed scores (``wait`` defaults to ``load``, as ``Scored``'s)."""

    def __init__(self, name: str, load: float = 0.0, wait: float | None = None) -> None:
        self.name = name
        self._load = load
        self._wait = wait

    def load(self) -> float:
        return self._load

    def wait(self) -> float:
        return self._load if self._wait is None else self._wait


def names(picks: list[Named]) -> list[str]:
    return [p.name for p in picks]


def test_round_robin_cycles_through_candidates() -> None:
    """round_robin visits every candidate in turn."""
    b: Balancer[Named] = Balancer(Policy.ROUND_ROBIN)
    fleet = [Named("a"), Named("b"), Named("c")]
    picks = names([b.pick(fleet) for _ in range(6)])
    assert Counter(picks) == {"a": 2, "b": 2, "c": 2}
    assert picks[:3] == picks[3:]


def test_least_load_picks_the_least_loaded() -> None:
    """least_load always picks the candidate with the smallest score."""
    b: Balancer[Named] = Balancer(Policy.LEAST_LOAD)
    fleet = [Named("a", 3), Named("b", 1), Named("c", 2)]
    assert {b.pick(fleet).name for _ in range(10)} == {"b"}


def test_least_load_rotates_between_equal_loads() -> None:
    """An idle fleet (equal loads) still spreads requests over every worker."""
    b: Balancer[Named] = Balancer(Policy.LEAST_LOAD)
    fleet = [Named("a"), Named("b")]
    picks = Counter(b.pick(fleet).name for _ in range(10))
    assert picks == {"a": 5, "b": 5}


def test_power_of_two_never_picks_the_most_loaded_of_three() -> None:
    """power_of_two compares two distinct candidates, so the strictly worst one never wins."""
    b: Balancer[Named] = Balancer(Policy.POWER_OF_TWO, rng=random.Random(1))
    fleet = [Named("a", 0), Named("b", 5), Named("c", 9)]
    picks = Counter(b.pick(fleet).name for _ in range(300))
    assert picks["c"] == 0
    assert picks["a"] > picks["b"] > 0


def test_single_candidate_is_returned() -> None:
    """With one candidate every policy returns it."""
    only = Named("only")
    for policy in Policy:
        b: Balancer[Named] = Balancer(policy)
        assert b.pick([only]) is only


@given(
    loads=st.lists(st.integers(0, 100), min_size=1, max_size=8),
    policy=st.sampled_from(list(Policy)),
    seed=st.integers(0, 1000),
)
def test_pick_is_always_a_candidate(loads: list[int], policy: Policy, seed: int) -> None:
    """Every policy returns one of the candidates it was given; least_load returns a minimum."""
    fleet = [Named(f"w{i}", load) for i, load in enumerate(loads)]
    b: Balancer[Named] = Balancer(policy, rng=random.Random(seed))
    picked = b.pick(fleet)
    assert any(picked is c for c in fleet)
    if policy is Policy.LEAST_LOAD:
        assert picked.load() == min(loads)


# -- the predicted wait ---------------------------------------------------------------------


@dataclass(frozen=True)
class View:
    running: int = 0
    waiting: int = 0
    capacity: int = 100_000
    waiting_uncached_tokens: int | None = 0
    total_tokens: int | None = 0
    max_running: int | None = 4
    prefill_tokens_per_s: float | None = 30_000.0


W = FREE_SLOT_WEIGHT


def test_free_slots_cost_a_share_of_a_slots_wait() -> None:
    """Free slots, no queued prefill: each request-equivalent below the limit costs a quarter of a
    slot's wait (0.25 s × 0.25 here), so the emptier worker is preferred."""
    idle = predicted_wait(wait_terms(View(), own_inflight=0, mean_work=100, slots=1), 0, 0)
    busier = predicted_wait(wait_terms(View(running=2), own_inflight=0, mean_work=100, slots=1), 0, 0)
    assert idle == pytest.approx(-3 * 0.25 * W) and busier == pytest.approx(-1 * 0.25 * W)


def test_requests_past_the_free_slots_wait_a_share_of_a_mean_service_each() -> None:
    """4 slots, 4 running + 2 waiting: 3 request-equivalents past the slots, each 100 tokens ×
    10 ms / 4 slots = 0.25 s; 3000 queued uncached tokens at 30 k tokens/s add 0.1 s."""
    view = View(running=4, waiting=2, waiting_uncached_tokens=3000)
    wait = predicted_wait(wait_terms(view, own_inflight=0, mean_work=100, slots=1), 0, 0)
    assert wait == pytest.approx(3 * 0.25 + 0.1 + 3 * 0.25 * W)


def test_own_work_is_weighted_and_signed() -> None:
    """The router's own requests count by their work, and its completions since the view subtract:
    three own 10-token requests weigh less than one 200-token one; finishing them frees the worker."""
    view = View(running=4, waiting=0)
    short = wait_terms(view, own_inflight=4, mean_work=100, slots=1)  # all four running are ours
    assert predicted_wait(short, 4 * 10, 0) < predicted_wait(short, 3 * 10 + 200, 0)
    # 4 slots full of our 200-token answers, then two of them finish: 2 slots free again.
    full = wait_terms(view, own_inflight=4, mean_work=200, slots=1)
    assert predicted_wait(full, 4 * 200, 0) > 0.5 > predicted_wait(full, 2 * 200, 0)


def test_prompts_sent_since_the_view_are_queued_prefill_at_the_measured_rate() -> None:
    """3000 prompt tokens sent since the view wait 0.1 s at 30 k tokens/s; no rate known, none."""
    terms = wait_terms(View(), own_inflight=0, mean_work=100, slots=1)
    assert predicted_wait(terms, 0, 3000) - predicted_wait(terms, 0, 0) == pytest.approx(0.1)
    unknown = wait_terms(View(prefill_tokens_per_s=None), own_inflight=0, mean_work=100, slots=1)
    assert predicted_wait(unknown, 0, 3000) == predicted_wait(unknown, 0, 0)


def test_kv_pressure_adds_the_drain_of_what_is_past_capacity() -> None:
    """10 000 tokens past a 100 000-token pool: a tenth of a mean service (1 s) to drain."""
    terms = wait_terms(View(total_tokens=110_000), own_inflight=0, mean_work=100, slots=1)
    room = wait_terms(View(total_tokens=90_000), own_inflight=0, mean_work=100, slots=1)
    assert predicted_wait(terms, 0, 0) - predicted_wait(room, 0, 0) == pytest.approx(0.1)


def test_without_a_full_view_only_the_routers_own_work_counts() -> None:
    """Stale, missing or six-position: own work against the last known slots, as least_request."""
    for terms in (
        wait_terms(None, own_inflight=0, mean_work=100, slots=4),
        wait_terms(View(waiting_uncached_tokens=None, running=50), own_inflight=0, mean_work=100, slots=4),
    ):
        assert predicted_wait(terms, 200, 0) < predicted_wait(terms, 800, 0)
        assert predicted_wait(terms, 800, 0) == pytest.approx((8 - 3) * 0.25 * (1 + W))


def test_request_work_is_max_tokens_plus_a_share_of_the_prompt() -> None:
    """max_tokens plus 0.003 per prompt token; no max_tokens: SGLang's default 128. Held packed,
    the sums of both stay apart."""
    assert held_work(request_work(200, 1000)) == (pytest.approx(203.0), 1000)
    assert held_work(request_work(None, 0)) == (128, 0)
    both = request_work(200, 1000) + request_work(10, 3000)
    assert held_work(both) == (pytest.approx(210 + 4000 * 0.003), 4000)
    assert held_work(both - request_work(200, 1000)) == (pytest.approx(10 + 3000 * 0.003), 3000)


_counts = st.integers(0, 50)


@settings(max_examples=300)
@given(
    base=st.tuples(_counts, _counts, st.integers(0, 20_000), st.integers(0, 120_000)),
    more=st.tuples(_counts, _counts, st.integers(0, 20_000), st.integers(0, 40_000)),
    own=st.tuples(st.floats(0, 5000), st.integers(0, 50_000)),
    extra_own=st.tuples(st.floats(0, 5000), st.integers(0, 50_000)),
    own_at_view=st.integers(0, 10),
    slots=st.integers(1, 16),
    rate=st.none() | st.floats(100, 1e6),
)
def test_less_work_of_every_kind_is_never_scored_worse(
    base: tuple[int, int, int, int],
    more: tuple[int, int, int, int],
    own: tuple[float, int],
    extra_own: tuple[float, int],
    own_at_view: int,
    slots: int,
    rate: float | None,
) -> None:
    """Same slots, pool, prefill rate and router history at the view: a worker with no more running,
    waiting, uncached and total tokens, own work and prompts since the view never waits longer."""
    less = View(base[0], base[1], 100_000, base[2], base[3], slots, rate)
    worse = View(
        base[0] + more[0], base[1] + more[1], 100_000, base[2] + more[2], base[3] + more[3], slots, rate
    )
    mean = 100.0
    a = predicted_wait(wait_terms(less, own_inflight=own_at_view, mean_work=mean, slots=1), own[0], own[1])
    b = predicted_wait(
        wait_terms(worse, own_inflight=own_at_view, mean_work=mean, slots=1),
        own[0] + extra_own[0],
        own[1] + extra_own[1],
    )
    assert a <= b + 1e-9


def test_least_request_and_least_load_use_their_own_scores() -> None:
    """least_request ranks by load, least_load and power_of_two by wait."""
    fleet = [Named("a", 1, 2.0), Named("b", 2, 1.0)]
    requests: Balancer[Named] = Balancer(Policy.LEAST_REQUEST)
    least: Balancer[Named] = Balancer(Policy.LEAST_LOAD)
    two: Balancer[Named] = Balancer(Policy.POWER_OF_TWO, rng=random.Random(0))
    assert (requests.pick(fleet).name, least.pick(fleet).name, two.pick(fleet).name) == ("a", "b", "b")
