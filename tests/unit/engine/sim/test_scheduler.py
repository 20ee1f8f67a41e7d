"""The simulated scheduler: step times, chunked prefill, prefix cache, KV admission, retraction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.engine.sim.costs import StepCosts
from dataplane.engine.sim.scheduler import (
    INIT_NEW_TOKEN_RATIO,
    CapacityError,
    SimRequest,
    SimScheduler,
)

# a = 10 ms, b = 1 ms per sequence, c = 0.1 ms per context token, 0.1 ms per prefill token,
# 100 prompt tokens per prefill step: round numbers, so every time below is worked out by hand.
COSTS = StepCosts(
    base_s=0.010,
    per_sequence_s=0.001,
    per_kv_token_s=0.0001,
    prefill_per_token_s=0.0001,
    chunked_prefill_size=100,
)
BLOCK = 4


def sched(running: int = 4, tokens: int = 10_000, costs: StepCosts = COSTS) -> SimScheduler:
    return SimScheduler(max_running_requests=running, max_total_tokens=tokens, costs=costs, block_size=BLOCK)


def blocks(*ids: int) -> tuple[int, ...]:
    return tuple(ids)


def test_instant_costs_answer_on_submit() -> None:
    """With zero costs a request is generated in full before submit returns and leaves no load."""
    s = sched(costs=StepCosts.instant())
    r = SimRequest(prompt_tokens=10, max_new_tokens=16)
    s.submit(r, now=0.0)
    assert r.finished and r.generated == 16
    assert s.counts() == (0, 0, 0, 10_000)


def test_a_lone_request_follows_the_step_model() -> None:
    """Prefill a + p·10 gives the first token; each decode step takes a + b + c·context."""
    s = sched()
    r = SimRequest(prompt_tokens=10, max_new_tokens=3)
    s.submit(r, 0.0)
    assert s.next_event_at() == pytest.approx(0.011)  # 10 ms + 10 × 0.1 ms
    assert s.advance(0.0109) == (0, 0) and r.generated == 0
    assert s.advance(0.011) == (1, 0)
    assert r.generated == 1 and r.first_token_at == pytest.approx(0.011)
    # Decode: 10 + 1 + 0.1 × (10 prompt + 1 generated) = 12.1 ms, then 12.2 ms.
    assert s.next_event_at() == pytest.approx(0.0231)
    assert s.advance(1.0) == (0, 2)
    assert r.finished and r.generated == 3
    assert s.counts() == (0, 0, 0, 10_000)


def test_decode_step_grows_with_the_batch_and_its_context() -> None:
    """Two sequences of 50 and 10 prompt tokens: a + 2b + c·(51 + 11) = 18.2 ms per step."""
    s = sched()
    a, b = SimRequest(prompt_tokens=50, max_new_tokens=5), SimRequest(prompt_tokens=10, max_new_tokens=5)
    s.submit(a, 0.0)
    s.submit(b, 0.0)  # queued behind a's prefill step (15 ms), prefilled in the next (11 ms)
    s.advance(0.026)
    assert (a.generated, b.generated) == (1, 1)
    assert b.first_token_at == pytest.approx(0.026)
    assert s.next_event_at() == pytest.approx(0.026 + 0.0182)


def test_a_prefill_pauses_decoding() -> None:
    """A request arriving mid-decode is prefilled in the next step; the decoder waits for it."""
    s = sched()
    first = SimRequest(prompt_tokens=10, max_new_tokens=10)
    s.submit(first, 0.0)
    s.advance(0.011)  # first token
    late = SimRequest(prompt_tokens=30, max_new_tokens=2)
    s.submit(late, 0.015)  # during the decode step 0.011 -> 0.0231
    s.advance(0.0231)
    assert first.generated == 2
    assert s.next_event_at() == pytest.approx(0.0231 + 0.013)  # late's prefill: 10 + 30 × 0.1 ms
    s.advance(0.0361)
    assert (first.generated, late.generated) == (2, 1)


def test_a_long_prompt_is_prefilled_in_chunks() -> None:
    """250 uncached tokens at 100 per step: three extend steps (10+10, 10+10, 10+5 ms)."""
    s = sched()
    r = SimRequest(prompt_tokens=250, max_new_tokens=2)
    s.submit(r, 0.0)
    assert s.advance(0.0549) == (2, 0) and r.generated == 0
    assert s.load_stat()[4] == 0  # the last 50 are being computed: nothing left to schedule
    assert s.advance(0.055) == (1, 0) and r.first_token_at == pytest.approx(0.055)


def test_a_repeated_system_prompt_skips_its_prefill() -> None:
    """A prompt whose 20 leading tokens (5 blocks) are cached prefills only its own 4 tokens."""
    s = sched()
    system = blocks(1, 2, 3, 4, 5)
    one = SimRequest(prompt_tokens=22, max_new_tokens=1, blocks=system)
    s.submit(one, 0.0)
    s.advance(1.0)
    assert one.first_token_at == pytest.approx(0.0122)  # all 22 prefilled
    assert s.total_prefill_uncached_tokens == 22
    two = SimRequest(prompt_tokens=24, max_new_tokens=1, blocks=(*system, 6))
    s.submit(two, 2.0)
    s.advance(3.0)
    assert two.first_token_at == pytest.approx(2.0104)  # 24 − 20 cached = 4 tokens
    assert s.total_prefill_uncached_tokens == 26
    # Unlocked cached blocks are not KV in use.
    assert s.counts()[2] == 0 and len(s.cache) == 6


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    """Extend is at least one token: its logits give the first output token."""
    s = sched()
    s.submit(SimRequest(prompt_tokens=8, max_new_tokens=1, blocks=blocks(1, 2)), 0.0)
    s.advance(1.0)
    again = SimRequest(prompt_tokens=8, max_new_tokens=1, blocks=blocks(1, 2))
    s.submit(again, 2.0)
    assert s.next_event_at() == pytest.approx(2.0101)


def test_cached_blocks_are_evicted_when_the_pool_needs_them() -> None:
    """An allocation that does not fit next to the evictable cache evicts it, oldest first."""
    s = sched(tokens=40)
    s.submit(SimRequest(prompt_tokens=32, max_new_tokens=1, blocks=tuple(range(8))), 0.0)
    s.advance(1.0)
    assert s.cache.evictable_tokens == 32 and s.counts()[2] == 0
    big = SimRequest(prompt_tokens=30, max_new_tokens=4)
    s.submit(big, 2.0)
    assert s.counts()[2] == 30
    assert s.counts()[2] + s.cache.evictable_tokens <= 40


def test_kv_estimate_limits_admission() -> None:
    """The second request waits while its prompt plus 0.7 × max_tokens does not fit beside the first's."""
    s = sched(running=10, tokens=100)
    a = SimRequest(prompt_tokens=40, max_new_tokens=20)
    b = SimRequest(prompt_tokens=40, max_new_tokens=20)
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    # 40 + 14 (a) + 40 + 14 (b) = 108 > 100
    assert s.counts()[:2] == (1, 1)
    s.advance(10.0)
    assert a.finished and b.finished


def test_running_slots_queue_the_rest_in_order() -> None:
    """Past max running requests, requests wait first come first served."""
    s = sched(running=2)
    reqs = [SimRequest(prompt_tokens=1, max_new_tokens=3) for _ in range(3)]
    for r in reqs:
        s.submit(r, 0.0)
    assert s.counts()[:2] == (1, 2)  # the first's extend step began before the others arrived
    s.advance(0.0101)
    assert s.counts()[:2] == (2, 1)
    s.advance(10.0)
    assert all(r.finished for r in reqs)
    assert reqs[2].started_at is not None and reqs[2].started_at >= max(
        r.first_token_at or 0 for r in reqs[:2]
    )


def test_the_youngest_request_is_retracted_when_kv_runs_out() -> None:
    """Over-admitted decoders fill the pool: the one with the fewest tokens goes back to the queue
    head, re-prefills its prompt and what it generated, and every answer still completes."""
    s = sched(running=4, tokens=100)
    old = SimRequest(prompt_tokens=20, max_new_tokens=40)
    young = SimRequest(prompt_tokens=20, max_new_tokens=40)
    s.submit(old, 0.0)
    s.advance(0.0125)  # old's first token ... then young arrives and is admitted (20 + 28 + 20 + 28 ≤ 100)
    s.submit(young, 0.0125)
    now = 0.0125
    while not (old.finished and young.finished):
        now += 0.001
        s.advance(now)
        assert s.counts()[2] + s.cache.evictable_tokens <= 100
    assert (young.retractions, old.retractions) == (1, 0) and s.retracted == 1
    assert old.generated == young.generated == 40
    assert s.counts() == (0, 0, 0, 100)


def test_the_ratio_is_re_estimated_after_a_retraction_and_reset_when_idle() -> None:
    """retract_decode sets (decoded + 20·kept) / (kept max_tokens + 1); an idle rank starts over."""
    s = sched(running=4, tokens=1000)
    old = SimRequest(prompt_tokens=4, max_new_tokens=700)
    young = SimRequest(prompt_tokens=4, max_new_tokens=700)
    s.submit(old, 0.0)
    s.advance(0.0105)
    s.submit(young, 0.0105)  # 6 in use + 0.7 × 699 + 4 + 0.7 × 700 ≤ 1000: admitted
    now = 0.0105
    while not s.retracted:
        now += 0.001
        s.advance(now)
    assert young.retractions == 1 and 400 < old.generated < 600
    assert s.new_token_ratio == pytest.approx((old.generated + 20) / 701)
    s.advance(100.0)
    assert s.new_token_ratio == INIT_NEW_TOKEN_RATIO


def test_an_answer_stops_at_its_own_length() -> None:
    """stop_at below max_new_tokens ends the answer there; above it, max_new_tokens wins."""
    s = sched()
    short, long = SimRequest(1, 10, stop_at=3), SimRequest(1, 4, stop_at=99)
    s.submit(short, 0.0)
    s.submit(long, 0.0)
    s.advance(10.0)
    assert (short.generated, long.generated) == (3, 4)


def test_load_stat_carries_sglangs_eleven_positions() -> None:
    """Waiting uncached tokens exclude cached prefixes; total tokens add every queued token."""
    s = sched(running=1)
    s.submit(SimRequest(prompt_tokens=8, max_new_tokens=1, blocks=blocks(1, 2)), 0.0)
    s.advance(1.0)
    busy = SimRequest(prompt_tokens=10, max_new_tokens=50)
    s.submit(busy, 2.0)
    s.submit(SimRequest(prompt_tokens=12, max_new_tokens=5, blocks=blocks(1, 2, 3)), 2.0)  # 8 cached
    s.submit(SimRequest(prompt_tokens=5, max_new_tokens=5), 2.0)
    running, waiting, used, cap, uncached, total, limit, prefilled, busy_us = s.load_stat()
    assert (running, waiting, used, cap, limit) == (1, 2, 10, 10_000, 1)
    assert uncached == (12 - 8) + 5
    assert total == 10 + 12 + 5
    assert prefilled == 8 + 10
    assert busy_us == 10_800 + 11_000  # the two extend steps: 10.8 ms and 11.0 ms


def test_request_larger_than_pool_is_refused() -> None:
    """A request that could never fit raises CapacityError and leaves no trace."""
    s = sched(tokens=100)
    with pytest.raises(CapacityError):
        s.submit(SimRequest(prompt_tokens=90, max_new_tokens=20), 0.0)
    assert s.counts() == (0, 0, 0, 100) and s.next_event_at() is None


def test_n_sequences_use_n_times_the_generated_tokens() -> None:
    """n parallel sequences share the prompt and consume n KV tokens per generated token."""
    s = sched()
    r = SimRequest(prompt_tokens=10, max_new_tokens=10, n=3)
    s.submit(r, 0.0)
    s.advance(0.011)
    # The prompt, 3 first tokens, and the 3 slots the decode step in flight writes.
    assert r.generated == 1 and s.counts()[2] == 10 + 3 + 3


def test_abort_frees_running_and_waiting_requests() -> None:
    """Aborting frees a running slot (the next is admitted) and removes a waiting request."""
    s = sched(running=1)
    a, b, c = (SimRequest(prompt_tokens=1, max_new_tokens=10) for _ in range(3))
    for r in (a, b, c):
        s.submit(r, 0.0)
    s.abort(c, 0.001)
    assert s.counts()[:2] == (1, 1)
    s.abort(a, 0.002)  # mid-step: the step still ends, then b is admitted
    s.advance(0.0101)
    assert b.started_at == pytest.approx(0.0101) and s.counts()[:2] == (1, 0)
    assert a.aborted and c.aborted and not b.finished and a.generated == 0


def test_next_event_at_is_the_end_of_the_step_in_flight() -> None:
    """None when idle; the end of the running step otherwise."""
    s = sched()
    assert s.next_event_at() is None
    s.submit(SimRequest(prompt_tokens=20, max_new_tokens=8), 1.0)
    assert s.next_event_at() == pytest.approx(1.012)


@settings(max_examples=80, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.integers(1, 60),
            st.integers(0, 30),
            st.integers(1, 3),
            st.floats(0, 0.05),
            st.integers(0, 3),
            st.booleans(),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_pool_and_slots_hold_and_everything_drains(ops: list[tuple[int, int, int, float, int, bool]]) -> None:
    """Whatever arrives (shared prefixes, aborts), running ≤ max, KV in use plus cached ≤ capacity,
    and every request finishes with its full answer; the pool ends empty."""
    s = sched(running=3, tokens=200)
    now, reqs = 0.0, []
    for prompt, new, n, dt, prefix, abort in ops:
        now += dt
        s.advance(now)
        shared = tuple(range(prefix))[: prompt // BLOCK]
        r = SimRequest(prompt_tokens=prompt, max_new_tokens=new, n=n, blocks=shared)
        try:
            s.submit(r, now)
        except CapacityError:
            continue
        reqs.append(r)
        if abort and len(reqs) > 1:
            s.abort(reqs[-2], now)
        running, _, used, cap = s.counts()
        assert running <= 3 and used + s.cache.evictable_tokens <= cap
    for _ in range(2000):
        now += 0.05
        s.advance(now)
        assert s.counts()[2] + s.cache.evictable_tokens <= 200
    assert all(r.finished for r in reqs)
    assert all(r.aborted or r.generated == r.max_new_tokens for r in reqs)
    assert s.counts() == (0, 0, 0, 200) and s.next_event_at() is None
