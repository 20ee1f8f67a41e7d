"""The ZMQ ingest (adapter): one SUB socket per (worker, dp rank), SPEC §7.

Every socket's ``ZMQ_FD`` is registered in one selector (epoll on Linux) of our own, and
only that selector's FD is watched by the event loop. Wakeups are coalesced: when it
signals, the loop stops watching it for ``COALESCE_S`` and then drains, in one callback,
every socket that became ready meanwhile, within a per-batch budget. At a thousand sockets
each frame arrives alone on its own connection; this turns 20 000 reader callbacks a second
into a few hundred bounded ones, so the push timer fires closer to on time. It did not
lower CPU per frame when the process had CPU to spare: that is the per-socket libzmq calls
below (``bench/load_ingest.py``, bench/README.md).

The FD is edge-triggered (libzmq signals "something changed", not "readable"), so a
socket's drain always runs until nothing is left; one that stops early (the per-socket
budget, for fairness) goes to the back of the queue and is drained in a later batch.

Frames are decoded with the shared codec and accounted in the pure ``LoadTable``;
malformed ones are counted and dropped, logged once per episode: the ingest never dies on
bad input. ``zmq.ZMQError`` never leaves this module.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog
import zmq

from controlplane.load import metrics
from controlplane.load.table import FrameOutcome, LoadTable, RankState
from controlplane.load.wire import WireError, decode_frame

log = structlog.get_logger(__name__)

# A rank publishes a few frames a second; 128 queued frames is seconds of backlog. Past
# it, libzmq drops new frames, which then show up as sequence gaps (counted).
RCVHWM = 128
# Bigger frames than this make libzmq drop the connection (it reconnects) instead of
# buffering them: a hostile or broken peer cannot make us allocate without bound. Frames
# up to this size are received and refused by the codec (counted as malformed).
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
# Frames handled per socket per turn (fairness between sockets) and per batch (a batch
# is one event-loop callback: ~15 ms at most, so gRPC and the watch pushes run between).
DRAIN_BUDGET = 16
BATCH_BUDGET = 1000
# How long signals are collected before a batch drains them: bounds the added latency
# (the WatchLoads target is p99 < 150 ms at a 50 ms push interval, issue 5).
COALESCE_S = 0.005
# libzmq's default cap is 1023 sockets per context: a fleet of 1000 workers x dp 8 needs more.
MAX_SOCKETS = 65536
# Reconnect backoff as in sgl-router's subscriber: 100 ms doubling to a 2 s cap.
RECONNECT_IVL_MS = 100
RECONNECT_IVL_MAX_MS = 2000
# A silently dead engine host is detected by TCP keepalive (then libzmq reconnects), NOT by
# ZMTP heartbeats: with a receive HWM, a SUB whose queue is full stops reading, misses the
# PINGs, reconnects, and libzmq <= 4.3.5 then aborts the whole process on
# "Assertion failed: _input_stopped" (zeromq/libzmq#3937, #4767). Seen here under load.
TCP_KEEPALIVE_IDLE_S = 10
TCP_KEEPALIVE_INTVL_S = 5
TCP_KEEPALIVE_CNT = 3


class SubscribeError(ValueError):
    """An endpoint libzmq refused to connect to."""


@dataclass(slots=True, eq=False)
class _Subscription:
    rank: RankState
    sock: zmq.Socket[bytes]
    fd: int
    closed: bool = False
    queued: bool = False


class LoadSubscriber:
    """Owns the ZMQ context and every SUB socket; feeds frames into ``table``.

    ``on_change`` is called (synchronously, cheaply) after each batch that accounted at
    least one frame, so the watch hub knows a push is due. Must be created and used on
    the running event loop's thread.
    """

    def __init__(
        self,
        table: LoadTable,
        on_change: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        rcvhwm: int = RCVHWM,
    ) -> None:
        self._table = table
        self._on_change = on_change
        self._clock = clock
        self._rcvhwm = rcvhwm
        self._loop = asyncio.get_running_loop()
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context(io_threads=1)
        self._ctx.set(zmq.MAX_SOCKETS, MAX_SOCKETS)
        self._subs: dict[str, list[_Subscription]] = {}
        self._selector = selectors.DefaultSelector()
        self._queue: deque[_Subscription] = deque()
        self._batch: asyncio.Handle | None = None
        self._watching = False
        self._watch()

    # -- lifecycle ----------------------------------------------------------------------

    def subscribe(self, url: str, ranks: Sequence[RankState], topic: bytes) -> None:
        """(Re)connect ``url``'s ranks: its previous sockets are closed first."""
        self.unsubscribe(url)
        subs: list[_Subscription] = []
        try:
            for rank in ranks:
                subs.append(self._open(rank, topic))
        except zmq.ZMQError as exc:
            for sub in subs:
                self._close(sub)
            raise SubscribeError(f"cannot subscribe to {rank.endpoint}: {exc}") from None
        self._subs[url] = subs
        metrics.LOAD_SUBSCRIPTIONS.inc(len(subs))
        # Frames may already be queued, and the edge-triggered FD would not say so.
        for sub in subs:
            self._enqueue(sub)
        self._schedule(0.0)

    def unsubscribe(self, url: str) -> int:
        """Close ``url``'s sockets; returns how many were closed."""
        subs = self._subs.pop(url, [])
        for sub in subs:
            self._close(sub)
        metrics.LOAD_SUBSCRIPTIONS.dec(len(subs))
        return len(subs)

    def socket_count(self, url: str | None = None) -> int:
        if url is not None:
            return len(self._subs.get(url, ()))
        return sum(len(subs) for subs in self._subs.values())

    def close(self) -> None:
        for url in list(self._subs):
            self.unsubscribe(url)
        self._unwatch()
        if self._batch is not None:
            self._batch.cancel()
            self._batch = None
        self._selector.close()
        self._ctx.destroy(linger=0)

    def _open(self, rank: RankState, topic: bytes) -> _Subscription:
        sock: zmq.Socket[bytes] = self._ctx.socket(zmq.SUB)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, self._rcvhwm)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
            # IPv6 only for IPv6 literals, as the engine's publisher does: with it on, libzmq
            # may resolve "localhost" to ::1 and retry there forever against a v4-only bind.
            if rank.endpoint.startswith("tcp://["):
                sock.setsockopt(zmq.IPV6, 1)
            sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
            sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
            sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, TCP_KEEPALIVE_IDLE_S)
            sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, TCP_KEEPALIVE_INTVL_S)
            sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, TCP_KEEPALIVE_CNT)
            sock.setsockopt(zmq.SUBSCRIBE, topic)
            sock.connect(rank.endpoint)
        except zmq.ZMQError:
            sock.close(linger=0)
            raise
        fd = int(sock.getsockopt(zmq.FD))
        sub = _Subscription(rank=rank, sock=sock, fd=fd)
        self._selector.register(fd, selectors.EVENT_READ, sub)
        return sub

    def _close(self, sub: _Subscription) -> None:
        if sub.closed:
            return
        sub.closed = True
        # Unregister before closing: the FD number may be reused at once.
        self._selector.unregister(sub.fd)
        sub.sock.close(linger=0)

    # -- wakeups ------------------------------------------------------------------------

    def _watch(self) -> None:
        if not self._watching:
            self._loop.add_reader(self._selector.fileno(), self._on_signal)
            self._watching = True

    def _unwatch(self) -> None:
        if self._watching:
            self._loop.remove_reader(self._selector.fileno())
            self._watching = False

    def _on_signal(self) -> None:
        # Stop watching until the batch has run: the signals of the next few ms then cost
        # nothing (the selector keeps them, level-triggered) and are drained together.
        self._unwatch()
        self._schedule(COALESCE_S)

    def _schedule(self, delay_s: float) -> None:
        if self._batch is None:
            self._batch = self._loop.call_later(delay_s, self._run_batch)

    def _enqueue(self, sub: _Subscription) -> None:
        if not sub.queued:
            sub.queued = True
            self._queue.append(sub)

    def _run_batch(self) -> None:
        self._batch = None
        enqueue = self._enqueue
        for key, _ in self._selector.select(0):
            enqueue(key.data)
        queue = self._queue
        drain = self._drain
        handled = 0
        while queue and handled < BATCH_BUDGET:
            sub = queue.popleft()
            sub.queued = False
            handled += drain(sub, min(DRAIN_BUDGET, BATCH_BUDGET - handled))
        if handled:
            self._on_change()
        if queue:
            # Frames left behind by a budget: their FDs will not signal again for them.
            self._schedule(0.0)
        else:
            self._watch()

    # -- the hot path -------------------------------------------------------------------

    def _drain(self, sub: _Subscription, budget: int) -> int:
        """Receive and account up to ``budget`` of ``sub``'s queued frames; how many.

        Requeues ``sub`` when the budget ran out with frames left.
        """
        if sub.closed:
            return 0
        sock = sub.sock
        recv = sock.recv
        events: Callable[[int], int] = sock.getsockopt  # type: ignore[assignment]
        rank = sub.rank
        handled = 0
        try:
            while handled < budget:
                # Signalled, so a frame is likely: receive first; after each frame ask
                # ZMQ_EVENTS (cheaper than a failing recv and its exception), which also
                # re-arms the edge-triggered FD when nothing is left.
                try:
                    part = recv(_NOBLOCK, copy=False)
                except zmq.Again:
                    return handled
                # Frame.more instead of recv_multipart's getsockopt(RCVMORE) per part: half
                # the cost. The parts of one message arrive together, so these never block.
                frames = [part.bytes]
                while part.more:
                    part = recv(_NOBLOCK, copy=False)
                    frames.append(part.bytes)
                handled += 1
                self._account(rank, frames)
                if not events(_EVENTS) & _POLLIN:
                    return handled
            self._enqueue(sub)
        except zmq.ZMQError as exc:
            # Never raise into the loop: a socket error here means the socket is unusable;
            # close it so it is no longer polled (re-registration reopens it).
            log.error(
                "load subscription failed", worker=rank.worker_url, dp_rank=rank.dp_rank, error=str(exc)
            )
            self._close(sub)
        return handled

    def _account(self, rank: RankState, frames: list[bytes]) -> None:
        totals = metrics.FRAMES
        try:
            seq, stat = decode_frame(frames)
        except WireError as exc:
            totals.malformed += 1
            if self._table.record_malformed(rank):
                log.warning(
                    "malformed load frame (dropping; logged once until a good frame)",
                    worker=rank.worker_url,
                    dp_rank=rank.dp_rank,
                    endpoint=rank.endpoint,
                    error=str(exc),
                )
            return
        before = rank.dropped_frames
        outcome = self._table.record_frame(rank, seq, stat, self._clock())
        if outcome is FrameOutcome.OK:
            totals.ok += 1
        elif outcome is FrameOutcome.GAP:
            totals.gap += 1
            totals.dropped += rank.dropped_frames - before
        else:
            totals.restart += 1


# Plain ints: the enum members cost a conversion on every call in the hot path.
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
