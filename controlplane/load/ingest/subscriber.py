"""The load ingest (adapter): one SUB connection per (worker, dp rank), SPEC §7.

Each rank's connection is a ZMTP 3.0 SUB peer of our own (``zmtp.py``) on a plain TCP
socket, not a libzmq socket: at a thousand publishers every frame arrives alone on its
connection, and libzmq SUB sockets read in batches by this same drain-per-push design
(``bench/libzmq_subscriber.py``) cost 1.3-1.8x the CPU per frame and 2-3x the p99 latency in a
same-run comparison, mostly libzmq's I/O thread waking and signalling a mailbox per
frame; here a frame costs a share of one ``recv`` and the parsing (``zmtp.py``,
bench/README.md, ``bench/load_ingest.py --ingest zmtp libzmq``).

Two paths per connection:

* connecting (rare, one task per rank): an attempt is ``dialer.dial`` (resolve,
  connect, greeting, NULL handshake, subscription); on failure or loss, again after 100 ms doubling to 2 s (libzmq's
  reconnect settings as sgl-router's subscriber uses them), every 10 s once an engine
  has been unreachable for about a minute; retries of all ranks share a 100 ms grid;
* receiving (hot): every established socket is in one level-triggered epoll of ours
  and only that epoll is watched by the event loop (``batches.py``). A batch (one callback) reads
  every ready socket once: all frames that arrived meanwhile (several per socket when we
  fell behind: a backlog is worked off in one read, not frame by frame). When the
  epoll signals, ``on_change`` tells the watch hub a push is due and a batch is
  scheduled at most once per tick (``tick_s``); the hub calls ``drain`` right before each
  push, so under a steady stream the ingest wakes once per push with everything since
  the last one (a tick of the push interval, as the control plane runs it) instead of
  once per frame. A frame after a quiet spell is read at once; ``drain`` before GetLoads
  makes what has arrived visible. An idle ingest costs nothing.

Frames are decoded with the shared codec and accounted in the pure ``LoadTable``;
malformed ones are counted and dropped, logged once per episode: the ingest never dies on
bad input, however large. A peer that breaks ZMTP is disconnected and reconnected, as
libzmq does. ``OSError`` never leaves this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog

from controlplane import metrics
from controlplane.load.ingest.batches import BATCH_BUDGET, BatchReader
from controlplane.load.ingest.dialer import Endpoint, describe, dial, parse_endpoint
from controlplane.load.ingest.zmtp import FrameReader, ZmtpError
from controlplane.load.table import FrameOutcome, LoadTable, RankState
from controlplane.load.wire import WireError, decode_frame

log = structlog.get_logger(__name__)

# A frame bigger than this is not buffered: its bytes are discarded as they arrive and its
# message is counted as malformed (``FrameReader``), so a hostile or broken peer cannot
# make us allocate without bound. The codec refuses smaller ones it cannot read.
MAX_FRAME_BYTES = 64 * 1024
# At most one batch per tick unless drained (the control plane uses its push interval:
# the hub drains before each push). This default suits a consumer that does not drain.
TICK_S = 0.005
# One read per ready socket per batch: ~400 frames, so a backlog is read in a few turns.
RECV_BYTES = 16 * 1024
# While a frame too large to buffer is being discarded: an 8 MiB one takes 8 batches.
SKIP_RECV_BYTES = 1024 * 1024
# Reconnect backoff as in sgl-router's subscriber (libzmq's RECONNECT_IVL, _MAX).
RECONNECT_IVL_S = 0.1
RECONNECT_IVL_MAX_S = 2.0
LONG_OUTAGE_ATTEMPTS = 35  # ~a minute at the cap above, then every LONG_OUTAGE_IVL_S
LONG_OUTAGE_IVL_S = 10.0
RECONNECT_SLOT_S = 0.1


@dataclass(slots=True, eq=False)
class _Link:
    """One rank's subscription: the connecting task owns ``sock`` until it is established."""

    rank: RankState
    endpoint: Endpoint
    topic: bytes
    sock: socket.socket | None = None
    reader: FrameReader | None = None
    task: asyncio.Task[None] | None = None
    lost: asyncio.Future[None] | None = None
    closed: bool = False
    failures: int = 0


class LoadSubscriber(BatchReader["_Link"]):
    """Owns every rank connection; feeds frames into ``table``.

    ``on_change`` is called (synchronously, cheaply) when frames are waiting and after
    each batch that accounted some, so the watch hub knows a push is due. Must be created
    and used on the running event loop's thread.
    """

    def __init__(
        self,
        table: LoadTable,
        on_change: Callable[[], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        tick_s: float = TICK_S,
    ) -> None:
        super().__init__(on_change, clock=clock, tick_s=tick_s)
        self._table = table
        self._links: dict[str, list[_Link]] = {}
        self._unread: list[_Link] = []
        self._watch()

    # -- lifecycle ----------------------------------------------------------------------

    def subscribe(self, url: str, ranks: Sequence[RankState], topic: bytes) -> None:
        """(Re)connect ``url``'s ranks: its previous connections are closed first."""
        targets = [(rank, parse_endpoint(rank.endpoint)) for rank in ranks]
        self.unsubscribe(url)
        links = [_Link(rank, endpoint, topic) for rank, endpoint in targets]
        for link in links:
            link.task = self._loop.create_task(self._keep_connected(link))
        self._links[url] = links
        metrics.LOAD_SUBSCRIPTIONS.inc(len(links))

    def unsubscribe(self, url: str) -> int:
        """Close ``url``'s connections; returns how many were closed."""
        links = self._links.pop(url, [])
        for link in links:
            link.closed = True
            if link.reader is not None:
                self._disconnect(link)  # established: the hot path owns it, close it now
            if link.task is not None:
                link.task.cancel()  # connecting: the task closes its socket as it unwinds
        metrics.LOAD_SUBSCRIPTIONS.dec(len(links))
        return len(links)

    def socket_count(self, url: str | None = None) -> int:
        if url is not None:
            return len(self._links.get(url, ()))
        return sum(len(links) for links in self._links.values())

    def close(self) -> None:
        for url in list(self._links):
            self.unsubscribe(url)
        self._stop_batching()

    # -- connecting ---------------------------------------------------------------------

    async def _keep_connected(self, link: _Link) -> None:
        delay = RECONNECT_IVL_S
        while not link.closed:
            try:
                dialed = await dial(link.endpoint, link.topic, MAX_FRAME_BYTES)
            except Exception as exc:  # whatever failed, this rank is retried
                # An engine that is down is retried quietly (its ranks show UNKNOWN or
                # STALE, as with libzmq); a peer that is not a ZMTP publisher, or anything
                # unexpected, is worth a line per failure episode.
                if not isinstance(exc, (OSError, TimeoutError)) and not link.failures:
                    log.warning(
                        "load publisher connection failed (retrying)",
                        worker=link.rank.worker_url,
                        dp_rank=link.rank.dp_rank,
                        endpoint=link.rank.endpoint,
                        error=str(exc),
                    )
                link.failures += 1
                self._table.record_connect_error(link.rank, describe(exc))
                await self._backoff(delay)
                # An engine down for a minute is starting (minutes for a large model) or
                # gone: retrying it every 2 s was 4x libzmq's CPU at a thousand ranks (each
                # attempt is a task wakeup, a socket and the kernel's SYN/RST, ~80 µs).
                cap = RECONNECT_IVL_MAX_S if link.failures < LONG_OUTAGE_ATTEMPTS else LONG_OUTAGE_IVL_S
                delay = min(2 * delay, cap)
                continue
            if link.closed:  # unsubscribed as the handshake completed
                dialed.sock.close()
                return
            delay = RECONNECT_IVL_S
            link.failures = 0
            self._table.record_connect_error(link.rank, "")
            link.lost = self._loop.create_future()
            self._attach(link, dialed.sock, dialed.reader)
            early = dialed.early
            if (early or dialed.reader.refused) and self._accept(link, early, self._clock()):
                self._on_change()
            try:
                await link.lost
            finally:
                self._disconnect(link)  # cancelled (unsubscribed): never leave it open
            await self._backoff(delay)

    async def _backoff(self, delay_s: float) -> None:
        # Retries end on a 100 ms grid: the ranks of a thousand stopped engines are tried in
        # ten wakeups a second, not in one wakeup per rank.
        now = self._loop.time()
        await asyncio.sleep(math.ceil((now + delay_s) / RECONNECT_SLOT_S) * RECONNECT_SLOT_S - now)

    def _attach(self, link: _Link, sock: socket.socket, reader: FrameReader) -> None:
        link.sock = sock
        link.reader = reader
        self._add(sock.fileno(), link)

    def _disconnect(self, link: _Link) -> None:
        """Close an established connection; its task reconnects unless the link is closed."""
        sock = link.sock
        if sock is None or link.reader is None:
            return
        link.reader = None
        link.sock = None
        self._remove(sock.fileno())
        sock.close()
        if link.lost is not None and not link.lost.done():
            link.lost.set_result(None)

    # -- the hot path -------------------------------------------------------------------

    def _run_batch(self, budget: int = BATCH_BUDGET) -> None:
        now = self._batch_started()
        handled = 0
        # Sockets a budget left unread last time go first (the selector would report them
        # in the same order again: those at the end would starve while a backlog lasts).
        ready = self._unread or self._ready()
        self._unread = []
        for index, link in enumerate(ready):
            reader = link.reader
            sock = link.sock
            if reader is None or sock is None:
                continue  # closed since (a budget's leftovers may be a turn old)
            try:
                data = sock.recv(SKIP_RECV_BYTES if reader.skip else RECV_BYTES)
            except (BlockingIOError, InterruptedError):
                continue
            except ConnectionResetError:  # the publisher went away: reconnect
                self._table.record_publisher_left(link.rank)
                self._disconnect(link)
                continue
            except OSError:  # e.g. keepalive timed out (the network, not the publisher): reconnect
                self._disconnect(link)
                continue
            if not data:  # closed by the publisher: reconnect
                self._table.record_publisher_left(link.rank)
                self._disconnect(link)
                continue
            try:
                handled += self._accept(link, reader.feed(data), now)
            except Exception as exc:  # one publisher's stream, never the ingest
                # ZmtpError: the peer broke the protocol. Anything else is a bug met on
                # this stream: it must not stop the others, so this one starts over too.
                log.warning(
                    "load publisher stream failed (reconnecting)",
                    worker=link.rank.worker_url,
                    dp_rank=link.rank.dp_rank,
                    endpoint=link.rank.endpoint,
                    error=str(exc) if isinstance(exc, ZmtpError) else repr(exc),
                    exc_info=not isinstance(exc, ZmtpError),
                )
                self._disconnect(link)
                continue
            if handled >= budget:
                self._unread = ready[index + 1 :]
                break
        if handled:
            self._on_change()
        if handled >= budget:
            # Level-triggered: what is left is read in the next turn of the loop.
            self._batch = self._loop.call_soon(self._run_batch)
        else:
            self._watch()

    def _accept(self, link: _Link, messages: list[list[bytes]], now: float) -> int:
        """Account ``messages`` of ``link``'s rank (per frame: keep this loop flat)."""
        rank = link.rank
        reader = link.reader
        refused = 0
        if reader is not None and reader.refused:
            # Messages too large to buffer ended before the ones read with them.
            for reason in reader.refused:
                self._malformed(rank, WireError(reason))
            refused = len(reader.refused)
            reader.refused.clear()
        record = self._table.record_frame
        totals = metrics.FRAMES
        for frames in messages:
            try:
                seq, stat = decode_frame(frames)
            except WireError as exc:
                self._malformed(rank, exc)
                continue
            before = rank.dropped_frames
            outcome = record(rank, seq, stat, now)
            if outcome is _OK:
                totals.ok += 1
            elif outcome is _GAP:
                totals.gap += 1
                totals.dropped += rank.dropped_frames - before
            else:
                totals.restart += 1
        if reader is not None and reader.replies:
            # PONGs (publishers with ZMTP heartbeats): tiny, best effort.
            with contextlib.suppress(OSError):
                link.sock.send(b"".join(reader.replies))  # type: ignore[union-attr]
            reader.replies.clear()
        return len(messages) + refused

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
