"""The simulated scheduler: admission, decode rate, KV pool, queueing and load counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.engine.sim.scheduler import CapacityError, SimRequest, SimScheduler


def sched(running: int = 4, tokens: int = 1000, rate: float = 10.0) -> SimScheduler:
    return SimScheduler(max_running_requests=running, max_total_tokens=tokens, decode_tokens_per_s=rate)


def test_instant_decode_finishes_on_submit() -> None:
    """At rate 0 a request is generated in full before submit returns and leaves no load."""
    s = sched(rate=0)
    r = SimRequest(prompt_tokens=10, max_new_tokens=16)
    s.submit(r, now=0.0)
    assert r.finished and r.generated == 16
    assert s.counts() == (0, 0, 0, 1000)


def test_decode_rate_paces_tokens() -> None:
    """At 10 tokens/s a request has 5 tokens after 0.5 s and finishes at 1 s."""
    s = sched(rate=10)
    r = SimRequest(prompt_tokens=10, max_new_tokens=10)
    s.submit(r, now=0.0)
    assert s.counts() == (1, 0, 10, 1000)
    s.step(0.5)
    assert r.generated == 5 and s.counts() == (1, 0, 15, 1000)
    s.step(1.0)
    assert r.finished and s.counts() == (0, 0, 0, 1000)


def test_progress_callback_sees_each_batch_of_tokens() -> None:
    """on_progress is called for new tokens and once at the end."""
    seen: list[tuple[int, bool]] = []
    s = sched(rate=10)
    r = SimRequest(
        prompt_tokens=1, max_new_tokens=3, on_progress=lambda q: seen.append((q.generated, q.finished))
    )
    s.submit(r, 0.0)
    for t in (0.1, 0.15, 0.2, 0.3):
        s.step(t)
    assert seen == [(1, False), (2, False), (3, True)]


def test_max_running_requests_queues_the_rest() -> None:
    """Past max running requests, requests wait in FIFO order and are admitted as slots free."""
    s = sched(running=2, rate=10)
    reqs = [SimRequest(prompt_tokens=1, max_new_tokens=10) for _ in range(3)]
    for i, r in enumerate(reqs):
        s.submit(r, now=0.1 * i)
    assert s.counts()[:2] == (2, 1)
    s.step(1.0)  # the first finishes; the third is admitted at t=1.0
    assert reqs[0].finished and reqs[2].started_at == 1.0
    assert s.counts()[:2] == (2, 0)


def test_kv_pool_limits_admission() -> None:
    """A request waits while its prompt plus max new tokens does not fit the pool."""
    s = sched(running=10, tokens=100, rate=10)
    s.submit(SimRequest(prompt_tokens=40, max_new_tokens=20), 0.0)
    s.submit(SimRequest(prompt_tokens=40, max_new_tokens=20), 0.0)
    assert s.counts()[:2] == (1, 1)


def test_request_larger_than_pool_is_refused() -> None:
    """A request that could never fit raises CapacityError and leaves no trace."""
    s = sched(tokens=100)
    with pytest.raises(CapacityError):
        s.submit(SimRequest(prompt_tokens=90, max_new_tokens=20), 0.0)
    assert s.counts() == (0, 0, 0, 100)


def test_n_sequences_use_n_times_the_generated_tokens() -> None:
    """n parallel sequences consume n × generated tokens of KV."""
    s = sched(rate=10)
    s.submit(SimRequest(prompt_tokens=10, max_new_tokens=10, n=3), 0.0)
    s.step(0.5)
    assert s.counts()[2] == 10 + 3 * 5


def test_abort_frees_running_and_waiting_requests() -> None:
    """Aborting frees a running slot (admitting the next) and removes a waiting request."""
    s = sched(running=1, rate=10)
    a, b, c = (SimRequest(prompt_tokens=1, max_new_tokens=10) for _ in range(3))
    for r in (a, b, c):
        s.submit(r, 0.0)
    s.abort(c, 0.1)
    assert s.counts()[:2] == (1, 1)
    s.abort(a, 0.2)
    assert b.started_at == 0.2 and s.counts()[:2] == (1, 0)
    assert a.aborted and c.aborted and not b.finished


def test_next_event_at() -> None:
    """The next token is due 1/rate after the last one; None when idle."""
    s = sched(rate=4)
    assert s.next_event_at() is None
    s.submit(SimRequest(prompt_tokens=1, max_new_tokens=8), 1.0)
    assert s.next_event_at() == pytest.approx(1.25)


@settings(max_examples=60)
@given(
    ops=st.lists(
        st.tuples(st.integers(1, 50), st.integers(0, 30), st.integers(1, 3), st.floats(0, 0.5)),
        min_size=1,
        max_size=30,
    )
)
def test_pool_and_slots_are_never_exceeded_and_everything_drains(
    ops: list[tuple[int, int, int, float]],
) -> None:
    """Whatever arrives, running ≤ max, KV in use ≤ capacity, and all requests eventually finish."""
    s = sched(running=3, tokens=200, rate=20)
    now, reqs = 0.0, []
    for prompt, new, n, dt in ops:
        now += dt
        s.step(now)
        r = SimRequest(prompt_tokens=prompt, max_new_tokens=new, n=n)
        try:
            s.submit(r, now)
        except CapacityError:
            continue
        reqs.append(r)
        running, _, used, cap = s.counts()
        assert running <= 3 and used <= cap
    for _ in range(1000):
        now += 0.05
        s.step(now)
    assert all(r.finished for r in reqs)
    assert s.counts() == (0, 0, 0, 200)
