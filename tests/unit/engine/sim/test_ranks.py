"""Rank loop ticks drive the real publisher; requests go to the least loaded rank."""

from __future__ import annotations

import asyncio
import time

from controlplane.load.wire import decode_frame
from dataplane.engine.publisher import LoadPublisher
from dataplane.engine.sim.costs import StepCosts
from dataplane.engine.sim.lengths import AnswerLengths
from dataplane.engine.sim.ranks import Progress, RankPicker, SimRank
from dataplane.engine.sim.scheduler import SimRequest, SimScheduler


class FakeSocket:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes, bytes]] = []

    def send_multipart(self, msg_parts: tuple[bytes, bytes, bytes], flags: int = 0) -> None:
        self.sent.append(msg_parts)

    def close(self, linger: int | None = None) -> None:
        pass


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def make_rank(rank: int = 0, rate: float = 10.0, interval: int = 5) -> tuple[SimRank, FakeSocket, Clock]:
    sock, clock = FakeSocket(), Clock()
    sched = SimScheduler(max_running_requests=1, max_total_tokens=1000, costs=StepCosts.fixed_rate(rate))
    pub = LoadPublisher(sock, attn_dp_rank=rank, clock=clock, interval=interval)
    return SimRank(rank, sched, pub, tick_s=0.005, clock=clock), sock, clock


def stats(sock: FakeSocket) -> list[tuple[int, int, int]]:
    return [(s.num_running_reqs, s.num_waiting_reqs, s.num_tokens) for _, s in map(decode_frame, sock.sent)]


def test_a_prefill_batch_is_published_at_once_and_idle_calls_are_forced() -> None:
    """As SGLang's loop: forced after an extend batch, forced when idle; a decode batch waits its turn."""
    rank, sock, clock = make_rank(rate=10.0)
    rank.tick()  # idle: the first stat goes out at once
    rank.submit(SimRequest(prompt_tokens=4, max_new_tokens=2))
    rank.submit(SimRequest(prompt_tokens=4, max_new_tokens=2))
    clock.now = 0.1  # the first's extend step ends: its first token
    rank.tick()
    clock.now = 0.2  # its decode step: finished (a throttled call, nothing sent) ...
    rank.tick()
    clock.now = 0.3  # ... the second's extend step: forced
    rank.tick()
    clock.now = 0.4  # its last decode step, then idle: forced
    rank.tick()
    assert stats(sock) == [(0, 0, 0), (1, 1, 6), (1, 0, 6), (0, 0, 0)]


def test_decode_batches_publish_every_interval_calls() -> None:
    """A decoding rank sends after every 5th decode batch (each changes its KV count)."""
    rank, sock, clock = make_rank(rate=100.0)
    rank.submit(SimRequest(prompt_tokens=4, max_new_tokens=30))
    for step in range(1, 13):
        clock.now = step * 0.01
        rank.tick()
    # the extend batch (forced), then decode batches 5 and 10 of 11
    assert [s[2] for s in stats(sock)] == [6, 11, 16]


def test_idle_rank_heartbeats_once_per_second() -> None:
    """An idle rank ticking every 5 ms sends its unchanged stat once per second."""
    rank, sock, clock = make_rank()
    for i in range(700):  # 3.5 s
        clock.now = i * 0.005
        rank.tick()
    assert len(sock.sent) == 4
    assert [int.from_bytes(f[1], "big") for f in sock.sent] == [0, 1, 2, 3]


def test_frames_carry_the_eleven_positions() -> None:
    """engine-sim's frames carry SGLang 0.5.23's appended counts: limit, prefill totals."""
    rank, sock, clock = make_rank(rate=10.0)
    rank.submit(SimRequest(prompt_tokens=4, max_new_tokens=1))
    clock.now = 0.1
    rank.tick()
    _, stat = decode_frame(sock.sent[-1])
    assert stat.extended and stat.max_running_requests == 1
    assert (stat.total_prefill_uncached_tokens, stat.total_prefill_busy_us) == (4, 100_000)


def test_the_rank_draws_each_answers_length() -> None:
    """With a stop distribution, a submitted request gets its own length below max_tokens."""
    rank, _, _ = make_rank()
    rank.lengths = AnswerLengths("uniform", seed=3)
    lengths = set()
    for _ in range(20):
        req = SimRequest(prompt_tokens=1, max_new_tokens=50)
        rank.submit(req)
        assert req.stop_at is not None and 1 <= req.stop_at <= 50
        lengths.add(req.stop_at)
        rank.abort(req)
    assert len(lengths) > 5


def test_picker_prefers_the_least_loaded_rank_round_robin_on_ties() -> None:
    """Ties rotate across ranks; a busier rank is skipped."""
    ranks = [make_rank(i)[0] for i in range(3)]
    picker = RankPicker(ranks)
    assert [picker.pick().rank for _ in range(3)] == [0, 1, 2]
    ranks[0].submit(SimRequest(prompt_tokens=1, max_new_tokens=5))
    # the rotation starts at 0, 1, 2; rank 0 is busy so it is passed over for the next idle one
    assert [picker.pick().rank for _ in range(3)] == [1, 1, 2]


def test_abort_through_the_rank_frees_the_slot() -> None:
    """Aborting a running request frees its slot at the rank's clock."""
    rank, _, _ = make_rank()
    req = SimRequest(prompt_tokens=1, max_new_tokens=5)
    rank.submit(req)
    rank.abort(req)
    assert rank.scheduler.counts()[:3] == (0, 0, 0)


async def test_progress_remembers_a_wake_up_that_came_before_the_wait() -> None:
    """A finish signalled while nobody waits resolves the next wait at once (no lost wake-up)."""
    progress = Progress(finish_only=True)
    req = SimRequest(prompt_tokens=1, max_new_tokens=1)
    req.finished = True
    progress(req)
    await asyncio.wait_for(progress.wait(), 1.0)


async def test_progress_finish_only_ignores_token_wake_ups() -> None:
    """A finish-only signal is not woken by tokens, only by the end."""
    progress = Progress(finish_only=True)
    req = SimRequest(prompt_tokens=1, max_new_tokens=5)
    waiter = progress.arm()
    progress(req)
    assert not waiter.done()
    req.finished = True
    progress(req)
    assert waiter.done()


async def test_progress_wakes_an_armed_waiter_per_token() -> None:
    """A streaming signal wakes its waiter on each batch of tokens."""
    progress = Progress()
    req = SimRequest(prompt_tokens=1, max_new_tokens=5)
    task = asyncio.ensure_future(progress.wait())
    await asyncio.sleep(0)
    progress(req)
    await asyncio.wait_for(task, 1.0)


async def test_idle_loop_wakes_at_once_when_a_request_arrives() -> None:
    """An idle rank's loop wakes on a request that takes time and publishes its extend batch as it
    ends, without waiting for the idle period."""
    rank, sock, _clock = make_rank(rate=100.0)
    rank.clock = time.monotonic
    rank.publisher._clock = time.monotonic
    rank.idle_tick_s = 60.0  # only the wake-up can make it tick again
    loop_task = asyncio.ensure_future(rank.run())
    try:
        for _ in range(100):
            await asyncio.sleep(0.01)
            if sock.sent:
                break
        assert stats(sock) == [(0, 0, 0)]
        rank.submit(SimRequest(prompt_tokens=4, max_new_tokens=5))
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(sock.sent) > 1:
                break
        assert stats(sock)[1] == (1, 0, 6)  # prompt, first token, the decode step's slot
    finally:
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)
