"""Admission control (SPEC §5): bounded in-flight slots and a bounded FIFO queue.

``--max-concurrency`` requests hold a slot at once; up to ``--queue-size`` more wait in FIFO
order for at most ``--queue-timeout-s``. A full queue is ``service_overloaded`` (429), a wait past
the timeout is ``queue_timeout`` (503). A waiter that leaves (its task is cancelled because the
client went away, or it timed out) leaves the queue at once, so it never takes a slot later.

Cost on the fast path (a slot is free): ``try_acquire`` is synchronous and allocates one small
token; no task, future or timer. Only a request that has to queue pays for a future and a timer.

A released slot is handed straight to the oldest waiter (FIFO, and a newcomer cannot overtake a
waiter between the release and the waiter's wake-up). Each ``Slot`` releases at most once, so a
double release can never inflate the capacity.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from dataplane.errors import QueueTimeout, ServiceOverloaded


class Slot:
    """The right to be in flight; ``release()`` gives it back (idempotent)."""

    __slots__ = ("_admission",)

    def __init__(self, admission: Admission) -> None:
        self._admission: Admission | None = admission

    def release(self) -> None:
        admission = self._admission
        if admission is not None:
            self._admission = None
            if admission._waiters:
                admission._release()  # hand it to the oldest waiter
            else:
                admission._in_use -= 1  # nobody waits: free it (the per-request path)

    @property
    def held(self) -> bool:
        return self._admission is not None

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Admission:
    """``max_concurrency`` slots plus a FIFO queue of ``queue_size`` waiters."""

    def __init__(self, max_concurrency: int, queue_size: int, queue_timeout_s: float) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        if queue_size < 0:
            raise ValueError("queue_size must be >= 0")
        if not queue_timeout_s > 0:
            raise ValueError("queue_timeout_s must be > 0")
        self.max_concurrency = max_concurrency
        self.queue_size = queue_size
        self.queue_timeout_s = queue_timeout_s
        self._in_use = 0
        # Futures of the waiters, oldest first. A waiter removes its own future when it leaves,
        # so len() is always the true queue depth (at most queue_size entries).
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def in_use(self) -> int:
        """Slots currently held (including ones handed to a waiter that has not resumed yet)."""
        return self._in_use

    @property
    def queue_depth(self) -> int:
        """Requests waiting for a slot (``fleetplane_admission_queue_depth``)."""
        return len(self._waiters)

    def try_acquire(self) -> Slot | None:
        """A slot now if one is free and nobody is queued before us, else ``None``."""
        if self._in_use < self.max_concurrency and not self._waiters:
            self._in_use += 1
            return Slot(self)
        return None

    async def acquire(self) -> Slot:
        """A slot, waiting in the FIFO queue if needed.

        Raises ``ServiceOverloaded`` when the queue is full and ``QueueTimeout`` after
        ``queue_timeout_s``. Cancellation (the client went away) leaves the queue; a slot that
        was handed over in the same instant is passed on, never lost.
        """
        slot = self.try_acquire()
        if slot is not None:
            return slot
        if len(self._waiters) >= self.queue_size:
            raise ServiceOverloaded()
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(self.queue_timeout_s, self._expire, waiter)
        try:
            await waiter
        except BaseException:
            # Timed out (QueueTimeout set by _expire, already dequeued) or cancelled.
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                # The slot was handed to us just before we were cancelled: pass it on.
                self._release()
            else:
                self._discard(waiter)
            raise
        finally:
            timer.cancel()
        return Slot(self)

    def _expire(self, waiter: asyncio.Future[None]) -> None:
        if not waiter.done():
            self._discard(waiter)
            waiter.set_exception(QueueTimeout())

    def _discard(self, waiter: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):  # already handed a slot or dequeued
            self._waiters.remove(waiter)

    def _release(self) -> None:
        # Hand the slot to the oldest live waiter (in_use unchanged), else free it.
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self._in_use -= 1
