"""The dp ranks of engine-sim: each a scheduler, its loop, and one real load publisher.

Each rank's loop sleeps until the scheduler's step in flight ends, runs the steps that ended and
calls the publisher as SGLang 0.5.23's scheduler loop does (SPEC §7): once per batch
(``process_batch_result``), forced after a prefill batch and throttled after a decode batch, and
forced on every idle iteration (``on_idle``), where dedup and the 1 s heartbeat bound what is
sent, so the load on the wire follows the requests and an idle rank still heartbeats. Handlers
wait on a :class:`Progress` signal instead of a task per request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import structlog

from dataplane.engine.publisher import LoadPublisher, create_load_publisher
from dataplane.engine.sim.lengths import AnswerLengths
from dataplane.engine.sim.scheduler import SimRequest, SimScheduler
from dataplane.engine.sim.settings import PAGE_SIZE, SimSettings

log = structlog.get_logger(__name__)


# An idle rank's loop period: forced idle calls keep the heartbeat within 1.00-1.02 s while
# costing a fraction of a busy rank's wake-ups (a shared 2-core machine runs several).
IDLE_TICK_S = 0.02
# A loop woken by the timer for the end of a step may read a clock a hair before it.
_WAKE_SLACK_S = 1e-6


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Progress:
    """Wakes one waiting handler when its request generated tokens or finished.

    Level-triggered: a wake-up that comes while nobody waits is remembered for the next
    :meth:`arm`, so a tick that lands between a handler's check and its wait is never lost.
    """

    __slots__ = ("_finish_only", "_future", "_pending")

    def __init__(self, *, finish_only: bool = False) -> None:
        # A non-streamed answer only cares about the end: no wake-up per generated token.
        self._finish_only = finish_only
        self._future: asyncio.Future[None] | None = None
        self._pending = False

    def __call__(self, request: SimRequest) -> None:
        if self._finish_only and not request.finished:
            return
        future = self._future
        if future is None or future.done():
            self._pending = True
        else:
            future.set_result(None)

    def arm(self) -> asyncio.Future[None]:
        """A future that resolves at the next wake-up (at once if one is pending)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._pending:
            self._pending = False
            future.set_result(None)
        else:
            self._future = future
        return future

    async def wait(self) -> None:
        try:
            await self.arm()
        finally:
            self._future = None


class SimRank:
    """One dp rank: scheduler + publisher + the loop that drives both."""

    def __init__(
        self,
        rank: int,
        scheduler: SimScheduler,
        publisher: LoadPublisher,
        *,
        tick_s: float,
        clock: Callable[[], float] = time.monotonic,
        lengths: AnswerLengths | None = None,
    ) -> None:
        self.rank = rank
        self.scheduler = scheduler
        self.publisher = publisher
        self.tick_s = tick_s  # the shortest sleep of a busy loop: bounds its wake-ups
        self.idle_tick_s = max(tick_s, IDLE_TICK_S)
        self.clock = clock
        self.lengths = lengths
        self._idle_wait: asyncio.Future[None] | None = None

    def submit(self, request: SimRequest) -> None:
        """Hand a request to the scheduler (finished at once when decoding is instant)."""
        if self.lengths is not None and request.stop_at is None:
            request.stop_at = self.lengths.sample(request.max_new_tokens)
        self.scheduler.submit(request, self.clock())
        idle_wait = self._idle_wait
        if not request.finished and idle_wait is not None and not idle_wait.done():
            idle_wait.set_result(None)  # an idle loop wakes at once: its step has begun

    def abort(self, request: SimRequest) -> None:
        self.scheduler.abort(request, self.clock())

    def tick(self) -> None:
        """One scheduler-loop iteration: finish the steps that ended, publishing as SGLang does.

        After each batch (``process_batch_result``): forced after a prefill batch, throttled after
        a decode batch. Idle (``on_idle``): forced on every iteration; the gate's dedup and its
        1 s heartbeat bound what goes out.
        """
        scheduler, publisher = self.scheduler, self.publisher
        prefills, decodes = scheduler.advance(self.clock() + _WAKE_SLACK_S)
        provider = scheduler.load_stat
        for _ in range(prefills):
            publisher.publish(provider, force=True)
        for _ in range(decodes):
            publisher.publish(provider)
        if scheduler.next_event_at() is None:
            publisher.publish(provider, force=True)

    async def run(self) -> None:
        """Tick until cancelled; a tick never raises (the publisher swallows its own failures).

        Busy: until the step in flight ends (at least ``tick_s``). Idle: every ``idle_tick_s``, or
        at once when a request that takes time arrives.
        """
        loop = asyncio.get_running_loop()
        while True:
            try:
                self.tick()
            except Exception:  # a simulation bug must not stop the rank's loop silently
                log.exception("engine-sim rank tick failed", rank=self.rank)
            step_end = self.scheduler.next_event_at()
            if step_end is not None:
                await asyncio.sleep(max(self.tick_s, step_end - self.clock()))
                continue
            idle_wait = self._idle_wait = loop.create_future()
            timer = loop.call_later(self.idle_tick_s, _resolve, idle_wait)
            try:
                await idle_wait
            finally:
                timer.cancel()
                self._idle_wait = None

    def close(self) -> None:
        self.publisher.close()


def build_ranks(settings: SimSettings, clock: Callable[[], float] = time.monotonic) -> list[SimRank]:
    """One rank per dp rank, each binding its publisher at ``base + rank`` when publishing is on.

    Raises ``PublisherBindError`` (after closing what it bound) when a port is taken.
    """
    ranks: list[SimRank] = []
    try:
        for rank in range(settings.dp_size):
            publisher = create_load_publisher(
                settings.load_range, dp_rank=rank, clock=clock, interval=settings.publish_interval
            )
            scheduler = SimScheduler(
                max_running_requests=settings.max_running_requests,
                max_total_tokens=settings.max_total_tokens,
                costs=settings.costs,
                block_size=PAGE_SIZE,
            )
            lengths = AnswerLengths(settings.answer_lengths, settings.seed * 1024 + rank)
            ranks.append(
                SimRank(rank, scheduler, publisher, tick_s=settings.tick_s, clock=clock, lengths=lengths)
            )
    except OSError:
        for built in ranks:
            built.close()
        raise
    return ranks


class RankPicker:
    """Least loaded rank (running + waiting), ties broken round robin."""

    __slots__ = ("_next", "_ranks")

    def __init__(self, ranks: list[SimRank]) -> None:
        self._ranks = ranks
        self._next = 0

    def pick(self) -> SimRank:
        ranks = self._ranks
        if len(ranks) == 1:
            return ranks[0]
        start = self._next
        self._next = (start + 1) % len(ranks)
        best = ranks[start]
        best_load = best.scheduler.load
        for i in range(1, len(ranks)):
            candidate = ranks[(start + i) % len(ranks)]
            if candidate.scheduler.load < best_load:
                best, best_load = candidate, candidate.scheduler.load
        return best
