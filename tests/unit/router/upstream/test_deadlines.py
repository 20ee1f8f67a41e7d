"""The shared deadline timer of the upstream pools (``dataplane.router.upstream.deadlines``)."""

from __future__ import annotations

import asyncio

from dataplane.router.upstream.deadlines import Deadlines


class Exchange:
    """A watched exchange that records when it timed out (loop time)."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired_at: float | None = None

    def on_timeout(self) -> None:
        assert self.fired_at is None, "timed out twice"
        self.fired_at = asyncio.get_running_loop().time()


async def test_each_deadline_fires_once_on_time_and_unwatched_ones_never() -> None:
    """Watched exchanges time out at their own deadline (an earlier one added later too); unwatched never."""
    loop = asyncio.get_running_loop()
    now = loop.time()
    deadlines = Deadlines()
    late, done, early = Exchange(now + 0.5), Exchange(now + 0.05), Exchange(now + 0.1)
    deadlines.watch(late, late.deadline, loop)
    deadlines.watch(done, done.deadline, loop)
    deadlines.watch(early, early.deadline, loop)
    deadlines.unwatch(done)  # finished in time
    # Checked once both are due, from the times they fired (not by looking at a moment between:
    # a busy machine can wake this test late, past the later deadline).
    await asyncio.sleep(0.6)
    assert early.fired_at is not None and early.fired_at >= early.deadline - 0.0011
    assert late.fired_at is not None and late.fired_at >= late.deadline - 0.0011
    # The earlier deadline, added last, had a timer of its own: it did not wait for the later.
    assert early.fired_at < late.deadline - 0.0011
    assert done.fired_at is None
    assert len(deadlines) == 0


async def test_cancel_drops_the_timer_only_when_nothing_is_watched() -> None:
    """cancel() on an owner with exchanges in flight keeps enforcing their deadlines."""
    loop = asyncio.get_running_loop()
    deadlines = Deadlines()
    pending = Exchange(loop.time() + 0.05)
    deadlines.watch(pending, pending.deadline, loop)
    deadlines.cancel()
    await asyncio.sleep(0.15)
    assert pending.fired_at is not None
