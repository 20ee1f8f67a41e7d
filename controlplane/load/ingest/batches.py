"""When the ingest reads (adapter): one selector watched by the event loop, batches per tick.

Shared by the ZMTP ingest (``subscriber.py``) and its bench-only libzmq comparison
(``bench/libzmq_subscriber.py``), so the two differ only in how a batch reads its sockets. The
event loop watches one selector holding every socket: its signal schedules a batch (one
callback that reads every ready socket), at most one per ``tick_s``, but a frame after a
quiet spell is read at once; the watch hub calls ``drain`` right before each push, so under
a steady stream the ingest wakes once per push, not once per frame.
"""

from __future__ import annotations

import asyncio
import select
from collections.abc import Callable
from typing import Generic, TypeVar

# Frames accounted per batch (one event-loop callback, a few ms) before the rest waits for
# the next turn, so gRPC and the watch pushes run in between while a backlog is worked off.
BATCH_BUDGET = 1000
DRAIN_BUDGET = 20 * BATCH_BUDGET  # a drain before a push: one frame of each of 20 000 ranks

T = TypeVar("T")


class BatchReader(Generic[T]):
    """The scheduling half of an ingest; a subclass reads its sockets in ``_run_batch``.

    ``on_change`` is called (synchronously, cheaply) when frames are waiting and after each
    batch that accounted some, so the watch hub knows a push is due. Must be created and
    used on the running event loop's thread; the subclass calls ``_watch()`` once set up.
    """

    def __init__(self, on_change: Callable[[], None], *, clock: Callable[[], float], tick_s: float) -> None:
        self._on_change = on_change
        self._clock = clock
        self._tick_s = tick_s
        self._loop = asyncio.get_running_loop()
        # The watch set: an epoll of our own (level-triggered) and what each FD belongs to.
        # Used directly, not through ``selectors``: its ``select`` builds a key tuple per
        # ready FD, a few per cent of the ingest's CPU at a thousand publishers.
        self._epoll = select.epoll()
        self._watched: dict[int, T] = {}
        self._batch: asyncio.Handle | None = None
        self._last_batch = float("-inf")
        self._watching = False
        self._closed = False

    def _run_batch(self, budget: int = BATCH_BUDGET) -> None:
        """Read the ready sockets, account at most ``budget`` frames; starts with ``_batch_started()``."""
        raise NotImplementedError

    def _add(self, fd: int, owner: T) -> None:
        self._epoll.register(fd, select.EPOLLIN)
        self._watched[fd] = owner

    def _remove(self, fd: int) -> None:
        """Stop watching ``fd``; call before closing it (the number may be reused at once)."""
        del self._watched[fd]
        self._epoll.unregister(fd)

    def _ready(self) -> list[T]:
        """The owners of the FDs that are readable now (never blocks)."""
        watched = self._watched
        if not watched:
            return []
        return [watched[fd] for fd, _ in self._epoll.poll(0, len(watched))]

    def drain(self) -> None:
        """Read now everything that has arrived (before a push or a GetLoads answer)."""
        if self._closed:
            return
        if self._batch is not None:
            self._batch.cancel()
        # A push encodes every worker that changed anyway: a budget-sized batch here would
        # leave the frames past the budget for the next push (one interval late).
        self._run_batch(DRAIN_BUDGET)

    def _stop_batching(self) -> None:
        """No more batches (``close``): stop watching, cancel a pending batch, close the epoll."""
        self._unwatch()
        if self._batch is not None:
            self._batch.cancel()
            self._batch = None
        self._epoll.close()
        self._watched.clear()
        self._closed = True

    def _batch_started(self) -> float:
        """Bookkeeping at the start of a batch; returns the clock's ``now`` for its frames."""
        self._batch = None
        self._last_batch = self._loop.time()
        return self._clock()

    def _watch(self) -> None:
        if not self._watching:
            self._loop.add_reader(self._epoll.fileno(), self._on_signal)
            self._watching = True

    def _unwatch(self) -> None:
        if self._watching:
            self._loop.remove_reader(self._epoll.fileno())
            self._watching = False

    def _on_signal(self) -> None:
        # Stop watching until the batch has run: the signals until then cost nothing (the
        # selector keeps them, level-triggered) and are read together. At most one batch
        # per tick, but a frame after a quiet spell is read at once (no added latency).
        self._unwatch()
        self._on_change()
        if self._batch is None:
            wait_s = self._last_batch + self._tick_s - self._loop.time()
            if wait_s > 0:
                self._batch = self._loop.call_later(wait_s, self._run_batch)
            else:
                self._batch = self._loop.call_soon(self._run_batch)
