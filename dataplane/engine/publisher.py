"""The per-scheduler ``LoadStat`` publisher an engine embeds (SPEC §7, reference C.1).

The scheduler loop calls :meth:`LoadPublisher.publish` as SGLang 0.5.23's does: after every
batch (forced after a prefill batch) and on every idle iteration (forced). :class:`PublishGate`
(pure, injected clock) decides whether this call sends: at most every ``interval``-th call unless
forced (SPEC §7: 5; SGLang 0.5.23 follows ``--load-snapshot-publish-interval``, default 15); a
changed stat at once; an unchanged one once per second, the heartbeat that keeps consumers' view
FRESH. Changes are judged on every count the stat carries (0.5.23 dedups on all nine). The
adapter owns the ZMQ PUB socket and never lets a failure escape into the scheduler loop: it logs
once per failure episode.

A provider returns the four counts of the original ``LoadStat`` (a six-position frame) or all
nine of SGLang 0.5.23 (eleven positions): ``(running, waiting, KV tokens in use, KV capacity,
waiting uncached tokens, total tokens, max running requests, cumulative prefill uncached tokens,
cumulative prefill busy µs)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import structlog
import zmq

from controlplane.load.wire import LoadStat, encode_frame
from dataplane.engine.endpoints import (
    LoadPubRange,
    is_load_publisher_rank,
    parse_tcp,
    select_publisher_dp_rank,
)

LOAD_PUBLISH_INTERVAL = 5
LOAD_PUBLISH_HEARTBEAT_S = 1.0
# Small HWM: a consumer that lags gets the newest stats, not a backlog. ZMQ_CONFLATE is not
# an option because it breaks multipart messages (reference C.1).
LOAD_PUB_HWM = 8

Counts = tuple[int, ...]
"""4 counts ``(num_running_reqs, num_waiting_reqs, num_tokens, max_total_num_tokens)``, or those and
the 5 appended ones (``num_waiting_uncached_tokens, num_total_tokens, max_running_requests,
total_prefill_uncached_tokens, total_prefill_busy_us``)."""

log = structlog.get_logger(__name__)


class PublisherBindError(OSError):
    """The publisher's endpoint could not be bound (port in use, bad address)."""


class _Sender(Protocol):
    def send_multipart(self, msg_parts: tuple[bytes, bytes, bytes], flags: int = ...) -> object: ...

    def close(self, linger: int | None = ...) -> None: ...


class PublishGate:
    """Throttle and change/heartbeat decisions, without I/O."""

    __slots__ = ("_calls", "_heartbeat_s", "_interval", "_last_counts", "_last_sent_at")

    def __init__(
        self, *, interval: int = LOAD_PUBLISH_INTERVAL, heartbeat_s: float = LOAD_PUBLISH_HEARTBEAT_S
    ) -> None:
        self._interval = interval
        self._heartbeat_s = heartbeat_s
        self._calls = 0
        self._last_counts: Counts | None = None
        self._last_sent_at = 0.0

    def tick(self, force: bool) -> bool:
        """Count a call; True when this one may read the stat (every ``interval``-th, or forced)."""
        self._calls += 1
        if not force and self._calls < self._interval:
            return False
        self._calls = 0
        return True

    def should_send(self, counts: Counts, now: float) -> bool:
        """A changed stat always; an unchanged one once the heartbeat period has passed."""
        return counts != self._last_counts or now - self._last_sent_at >= self._heartbeat_s

    def sent(self, counts: Counts, now: float) -> None:
        self._last_counts = counts
        self._last_sent_at = now


class LoadPublisher:
    """One scheduler's publisher; disabled (every call a no-op) when it has no socket."""

    def __init__(
        self,
        socket: _Sender | None,
        *,
        attn_dp_rank: int | None,
        endpoint: str = "",
        clock: Callable[[], float] = time.monotonic,
        interval: int = LOAD_PUBLISH_INTERVAL,
    ) -> None:
        self._socket = socket
        self.attn_dp_rank = attn_dp_rank
        self.endpoint = endpoint
        self._clock = clock
        self._gate = PublishGate(interval=max(1, interval))
        self._seq = 0  # the seq of the next frame that goes out: one per published frame
        self._failing = False

    @classmethod
    def disabled(cls) -> LoadPublisher:
        return cls(None, attn_dp_rank=None)

    @classmethod
    def bind(
        cls,
        endpoint: str,
        *,
        attn_dp_rank: int | None,
        clock: Callable[[], float] = time.monotonic,
        context: zmq.Context[zmq.Socket[bytes]] | None = None,
        interval: int = LOAD_PUBLISH_INTERVAL,
    ) -> LoadPublisher:
        """A publisher bound at ``endpoint``; raises :class:`PublisherBindError` if it cannot bind."""
        ctx = context if context is not None else zmq.Context.instance()
        sock = ctx.socket(zmq.PUB)
        try:
            sock.setsockopt(zmq.SNDHWM, LOAD_PUB_HWM)
            sock.setsockopt(zmq.LINGER, 0)
            parsed = parse_tcp(endpoint)
            if parsed is not None and parsed.is_ipv6:
                sock.setsockopt(zmq.IPV6, 1)
            sock.bind(endpoint)
        except zmq.ZMQError as exc:
            sock.close(linger=0)
            raise PublisherBindError(f"cannot bind load publisher at {endpoint}: {exc}") from None
        return cls(sock, attn_dp_rank=attn_dp_rank, endpoint=endpoint, clock=clock, interval=interval)

    @property
    def enabled(self) -> bool:
        return self._socket is not None

    def publish(self, provider: Callable[[], Counts], *, force: bool = False) -> bool:
        """Maybe send the current stat; True when a frame went out. Never raises.

        ``provider`` is read only when the throttle lets this call through, so calling
        this on every scheduler iteration stays cheap.
        """
        if self._socket is None or not self._gate.tick(force):
            return False
        try:
            counts = provider()
            now = self._clock()
            if not self._gate.should_send(counts, now):
                return False
            self._socket.send_multipart(encode_frame(self._seq, self._stat(counts)), zmq.NOBLOCK)
        except Exception as exc:  # never raised into the scheduler loop (SPEC §7)
            if not self._failing:
                self._failing = True
                log.warning(
                    "load publish failed; routers fall back to their in-flight load signal",
                    endpoint=self.endpoint,
                    error=repr(exc),
                )
            return False
        if self._failing:
            self._failing = False
            log.info("load publish recovered", endpoint=self.endpoint)
        # Only a frame that went out takes a seq: a send that raised is no frame, and a gap
        # would make consumers count it as dropped on the wire (SPEC §7).
        self._seq += 1
        self._gate.sent(counts, now)
        return True

    def _stat(self, counts: Counts) -> LoadStat:
        if len(counts) == 4:
            return LoadStat(*counts, attn_dp_rank=self.attn_dp_rank)
        if len(counts) != 9:
            raise ValueError(f"a load provider returns 4 or 9 counts, got {len(counts)}")
        running, waiting, tokens, capacity, uncached, total, max_running, prefilled, busy_us = counts
        return LoadStat(
            running,
            waiting,
            tokens,
            capacity,
            self.attn_dp_rank,
            uncached,
            total,
            max_running,
            prefilled,
            busy_us,
        )

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None


def create_load_publisher(
    load_range: LoadPubRange | None,
    *,
    dp_rank: int,
    attn_dp_size: int = 1,
    attn_dp_rank: int = 0,
    pp_rank: int = 0,
    attn_tp_rank: int = 0,
    attn_cp_rank: int = 0,
    clock: Callable[[], float] = time.monotonic,
    context: zmq.Context[zmq.Socket[bytes]] | None = None,
    interval: int = LOAD_PUBLISH_INTERVAL,
) -> LoadPublisher:
    """The publisher of one scheduler: bound at ``base + rank`` when it is a publishing rank."""
    if load_range is None or not is_load_publisher_rank(
        pp_rank=pp_rank, attn_tp_rank=attn_tp_rank, attn_cp_rank=attn_cp_rank
    ):
        return LoadPublisher.disabled()
    rank = select_publisher_dp_rank(attn_dp_size=attn_dp_size, attn_dp_rank=attn_dp_rank, dp_rank=dp_rank)
    return LoadPublisher.bind(
        load_range.endpoint(rank), attn_dp_rank=rank, clock=clock, context=context, interval=interval
    )
