"""The load ingest through libzmq SUB sockets, read in batches (adapter), SPEC §7.

The same interface and accounting as ``controlplane.load.ingest.subscriber.LoadSubscriber`` (a ZMTP peer of our
own), kept so ``bench/load_ingest.py`` measures both in one run (``--ingest``): the
ZMTP ingest is justified only by that comparison with the best libzmq design we have.

Same architecture as the ZMTP ingest: the watch hub calls ``drain`` right before each push.
A drain is one ``zmq_poll`` with timeout 0 over every socket (libzmq checks each socket's
``ZMQ_EVENTS``, which also processes its mailbox), then, per ready socket,
every message (its parts with ``recv(NOBLOCK, copy=False)``) until ``ZMQ_EVENTS`` says nothing is left: no ``zmq.Again``
on the hot path. Between drains, every socket's ``ZMQ_FD`` is in one selector of ours and
only that selector is watched by the event loop: a frame after a quiet spell wakes a batch
at once, the frames after it wait for the next push (at most one batch per tick).

Socket settings as the libzmq ingest before the ZMTP one had them (git history of
``controlplane/load/ingest/subscriber.py``): small RCVHWM, MAXMSGSIZE, reconnect backoff as sgl-router's, TCP
keepalive and no ZMTP heartbeats (zeromq/libzmq#3937, #4767). ``zmq.ZMQError`` never
leaves this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog
import zmq

from controlplane import metrics
from controlplane.load.ingest.batches import BATCH_BUDGET, BatchReader
from controlplane.load.ingest.dialer import (
    TCP_KEEPALIVE_CNT,
    TCP_KEEPALIVE_IDLE_S,
    TCP_KEEPALIVE_INTVL_S,
    SubscribeError,
)
from controlplane.load.ingest.subscriber import MAX_FRAME_BYTES, TICK_S
from controlplane.load.table import FrameOutcome, LoadTable, RankState
from controlplane.load.wire import WireError, decode_frame

log = structlog.get_logger(__name__)

# A rank publishes a few frames a second; 128 queued frames is seconds of backlog. Past
# it, libzmq drops new frames, which then show up as sequence gaps (counted).
RCVHWM = 128
# libzmq's default cap is 1023 sockets per context: a fleet of 1000 workers x dp 8 needs more.
MAX_SOCKETS = 65536
# Reconnect backoff as in sgl-router's subscriber: 100 ms doubling to a 2 s cap.
RECONNECT_IVL_MS = 100
RECONNECT_IVL_MAX_MS = 2000
# A dead engine host is detected by TCP keepalive (the ingest's settings, ``dialer.py``), NOT
# by ZMTP heartbeats: a SUB whose queue is full stops reading, misses the PINGs, reconnects,
# and libzmq <= 4.3.5 then aborts the process on "Assertion failed: _input_stopped"
# (zeromq/libzmq#3937, #4767).


@dataclass(slots=True, eq=False)
class _Subscription:
    rank: RankState
    sock: zmq.Socket[bytes]
    fd: int
    closed: bool = False


class LibzmqSubscriber(BatchReader["_Subscription"]):
    """Owns the ZMQ context and every SUB socket; feeds frames into ``table``.

    ``on_change`` is called (synchronously, cheaply) when frames are waiting and after
    each batch that accounted some. Must be created and used on the event loop's thread.
    """

    def __init__(
        self,
        table: LoadTable,
        on_change: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        tick_s: float = TICK_S,
        rcvhwm: int = RCVHWM,
    ) -> None:
        super().__init__(on_change, clock=clock, tick_s=tick_s)
        self._table = table
        self._rcvhwm = rcvhwm
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context(io_threads=1)
        self._ctx.set(zmq.MAX_SOCKETS, MAX_SOCKETS)
        self._subs: dict[str, list[_Subscription]] = {}
        self._by_socket: dict[zmq.Socket[bytes], _Subscription] = {}
        self._poll_items: list[tuple[zmq.Socket[bytes], int]] = []
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
        self._poll_items = [(sock, _POLLIN) for sock in self._by_socket]
        metrics.LOAD_SUBSCRIPTIONS.inc(len(subs))
        self._on_signal()  # frames may be queued already: the FD would not say so

    def unsubscribe(self, url: str) -> int:
        """Close ``url``'s sockets; returns how many were closed."""
        subs = self._subs.pop(url, [])
        for sub in subs:
            self._close(sub)
        if subs:
            self._poll_items = [(sock, _POLLIN) for sock in self._by_socket]
        metrics.LOAD_SUBSCRIPTIONS.dec(len(subs))
        return len(subs)

    def socket_count(self, url: str | None = None) -> int:
        if url is not None:
            return len(self._subs.get(url, ()))
        return sum(len(subs) for subs in self._subs.values())

    def close(self) -> None:
        for url in list(self._subs):
            self.unsubscribe(url)
        self._stop_batching()
        self._ctx.destroy(linger=0)

    def _open(self, rank: RankState, topic: bytes) -> _Subscription:
        sock: zmq.Socket[bytes] = self._ctx.socket(zmq.SUB)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, self._rcvhwm)
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
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
        self._add(fd, sub)
        self._by_socket[sock] = sub
        return sub

    def _close(self, sub: _Subscription) -> None:
        if sub.closed:
            return
        sub.closed = True
        # Unregister before closing: the FD number may be reused at once.
        self._remove(sub.fd)
        del self._by_socket[sub.sock]
        sub.sock.close(linger=0)

    # -- the hot path -------------------------------------------------------------------

    def _run_batch(self, budget: int = BATCH_BUDGET) -> None:
        now = self._batch_started()
        handled = 0
        ready: list[tuple[zmq.Socket[bytes], int]]
        try:
            # zmq_poll checks every socket's ZMQ_EVENTS: it finds every socket with frames
            # queued whatever its edge-triggered FD said, and re-arms those FDs.
            ready = zmq.zmq_poll(self._poll_items, 0) if self._poll_items else []  # type: ignore[assignment]
        except zmq.ZMQError as exc:
            log.error("load poll failed", error=str(exc))
            ready = []
        by_socket = self._by_socket
        for sock, _ in ready:
            sub = by_socket.get(sock)
            if sub is not None:
                handled += self._read(sub, now)
                if handled >= budget:
                    break
        if handled:
            self._on_change()
        if handled >= budget:
            self._batch = self._loop.call_soon(self._run_batch)  # the rest in the next turn
        else:
            self._watch()

    def _read(self, sub: _Subscription, now: float) -> int:
        """Receive and account every frame queued on ``sub``'s socket; how many."""
        sock = sub.sock
        recv = sock.recv
        events: Callable[[int], int] = sock.getsockopt  # type: ignore[assignment]
        rank = sub.rank
        record = self._table.record_frame
        totals = metrics.FRAMES
        handled = 0
        try:
            while True:
                # Signalled by zmq_poll or ZMQ_EVENTS: a whole message is queued, so this
                # never raises zmq.Again (the parts of a message arrive together).
                # recv_multipart asks ZMQ_RCVMORE per part (pyzmq maps each option to its
                # enum, ~1 µs); Frame.more is a field read: 15 % less CPU per frame here.
                part = recv(_NOBLOCK, copy=False)
                frames = [part.bytes]
                while part.more:
                    part = recv(_NOBLOCK, copy=False)
                    frames.append(part.bytes)
                handled += 1
                try:
                    seq, stat = decode_frame(frames)
                except WireError as exc:
                    self._malformed(rank, exc)
                else:
                    before = rank.dropped_frames
                    outcome = record(rank, seq, stat, now)
                    if outcome is _OK:
                        totals.ok += 1
                    elif outcome is _GAP:
                        totals.gap += 1
                        totals.dropped += rank.dropped_frames - before
                    else:
                        totals.restart += 1
                if not events(_EVENTS) & _POLLIN:
                    return handled
        except zmq.ZMQError as exc:
            # Never raise into the loop: a socket error here means the socket is unusable;
            # close it so it is no longer polled (re-registration reopens it).
            log.error(
                "load subscription failed", worker=rank.worker_url, dp_rank=rank.dp_rank, error=str(exc)
            )
            self._close(sub)
            self._poll_items = [(s, _POLLIN) for s in self._by_socket]
        return handled

    def _malformed(self, rank: RankState, exc: WireError) -> None:
        metrics.FRAMES.malformed += 1
        if self._table.record_malformed(rank):
            log.warning(
                "malformed load frame (dropping; logged once until a good frame)",
                worker=rank.worker_url,
                dp_rank=rank.dp_rank,
                endpoint=rank.endpoint,
                error=str(exc),
            )


_OK = FrameOutcome.OK
_GAP = FrameOutcome.GAP
# Plain ints: the enum members cost a conversion on every call in the hot path.
_NOBLOCK = int(zmq.NOBLOCK)
_EVENTS = int(zmq.EVENTS)
_POLLIN = int(zmq.POLLIN)
