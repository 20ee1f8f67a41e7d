"""One forwarded request driven by callbacks: no task and no coroutine chain.

ARCHITECTURE's hot-path budget: an asyncio task per request (creation, first step, the
coroutine frames of the request path, the head future) is a large share of the router's
Python cost per request. When a slot is free and the worker has an idle HTTP/1.1 connection,
``Proxy`` writes the request at once (``H1Pool.start``) and returns ``DEFERRED`` to the HTTP
server; the rest happens in callbacks of this object:

- ``on_response`` (the worker's head arrived, called from the upstream connection's
  ``data_received``): a complete answer is written to the client in one go and the request is
  finished there; a streamed one (SSE, NDJSON) is relayed from the connection's callbacks too
  (``relay.StreamRelay``); any other answer still on its way (large, or to a client whose
  responder cannot ``send``) is relayed by a task from then on (``relay.relay_rest``), exactly
  as on the task path;
- ``on_failure`` (timeout, worker dropped the connection before the head): the SPEC §5 error;
  ``UpstreamUnreachable`` (an h2c worker refused the stream on both tries, RFC 9113 §8.7:
  nothing reached it) hands the request to the task path, which tries another worker (SPEC §5);
- ``on_client_gone`` (``Responder.on_disconnect``, whose callback is the exchange itself): the
  upstream connection is closed (RFC 9112 §9.6: the only way to cancel an h1 exchange), the
  answer aborted.

Exactly one of them finishes the request: each clears what would let another run (the
connection forgets its listener, the responder its disconnect callback). A bug in a callback
answers 500 like a failing handler (``answer_internal_error``) and still gives back the slot
and the in-flight count.
"""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter as _perf_counter
from typing import Final, Protocol

from dataplane.errors import RouterError, UpstreamUnreachable
from dataplane.http import Request, Responder, answer_internal_error, spawn
from dataplane.http.http1_responder import JOIN_BODY_MAX
from dataplane.http.wire import body_allowed, encode_h1_head, length_line
from dataplane.router.admission import Slot
from dataplane.router.body import RequestBody
from dataplane.router.fleet.workers import Worker
from dataplane.router.headers import Forwarded, Headers
from dataplane.router.metrics import CLIENT_GONE, RouterMetrics, RouteStats, count_outcome
from dataplane.router.path.relay import CLIENT_CLOSED, StreamRelay, outcome_of, passes_through, relay_rest
from dataplane.router.upstream.base import ResponseListener, StreamedResponse
from dataplane.router.upstream.h1.connection import H1Response

# Bound as a Final: compiled (scripts/build_mypyc.sh), an imported name is a lookup in the
# module's globals at every call.
perf_counter: Final = _perf_counter
# Head encodings kept by ``Host.h1_head`` (a few per h2c connection and status).
_HEADS_MAX: Final = 256

_log = logging.getLogger(__name__)


class Host:
    """What an exchange needs from the forwarder that started it (``forwarder.Forwarder``
    extends it).

    A base class rather than a Protocol: compiled (scripts/build_mypyc.sh), a Protocol-typed
    reference makes every attribute read and call a generic lookup by name; through a native
    base class they are field reads and vtable calls.
    """

    metrics: RouterMetrics
    # The HTTP/1.1 lines of the extra headers last asked for (``h1_lines``).
    _lines_of: Headers | None = None
    _lines: bytes = b""
    # ``h1_head``'s table: id(headers) -> (headers, extra, status, head); and the entry used
    # last, tested first (an int key past 256 costs the lookup a new int object and a compare).
    _heads: dict[int, tuple[Headers, Headers, int, bytes]] | None = None
    _last_head: tuple[Headers, Headers, int, bytes] | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        raise NotImplementedError

    def h1_lines(self, extra: Headers) -> bytes:
        """``extra`` as HTTP/1.1 header lines (CRLF after each). The list is the same object for
        every answer under one contract snapshot (``ContractSet.revision_headers``): encoded once."""
        if extra is self._lines_of:
            return self._lines
        lines = b"".join([b"%s: %s\r\n" % (name, value) for name, value in extra])
        self._lines_of = extra
        self._lines = lines
        return lines

    def h1_head(self, status: int, headers: Headers, extra: Headers) -> bytes | None:
        """The HTTP/1.1 head of a complete answer with ``status``, ``headers`` then ``extra``, up
        to its framing: its Content-Length line (``wire.length_line``) and the blank line follow,
        as ``encode_h1_head`` writes them. None when the answer has no body or closes the
        connection (``encode_h1_head`` decides those).

        Kept per header list object (a bounded table holding the lists, so no id is reused): an
        h2c worker's repeated header blocks decode to one list per connection
        (``upstream.h2c.codec``), and ``extra`` is one list per contract snapshot.
        """
        kept = self._last_head
        if kept is not None and kept[0] is headers and kept[1] is extra and kept[2] == status:
            return kept[3]
        heads = self._heads
        if heads is None:
            heads = self._heads = {}
        kept = heads.get(id(headers))
        if kept is not None and kept[0] is headers and kept[1] is extra and kept[2] == status:
            self._last_head = kept
            return kept[3]
        if not body_allowed(status):
            return None
        head, close = encode_h1_head(status, headers + extra if extra else headers, None, False, False)
        if close:
            return None
        head = head[:-2]  # without the blank line
        if len(heads) >= _HEADS_MAX:
            heads.clear()
        heads[id(headers)] = self._last_head = (headers, extra, status, head)
        return head

    def retry_elsewhere(
        self,
        stats: RouteStats,
        started: float,
        request: Request,
        responder: Responder,
        resend: Resend,
        extra: Headers,
        stream: bool,
        work: int,
        slot: Slot,
        worker: Worker,
    ) -> None:
        """Forward the request again, to another worker than ``worker`` (unreachable), in a task
        that owns ``slot`` and answers the client from now on."""
        raise NotImplementedError


# What the task path needs to send a request again: target, body, headers, the worker group.
Resend = tuple[bytes, RequestBody, Forwarded, tuple[Worker, ...]]


class Abandonable(Protocol):
    """The upstream connection carrying the exchange (``upstream.h1.connection.H1Connection``)."""

    def abandon(self) -> None: ...


class Exchange(ResponseListener):
    """A judged (or unjudged ``/v1/*``) request whose answer is awaited through callbacks."""

    __slots__ = (
        "_extra",
        "_proxy",
        "_request",
        "_responder",
        "_slot",
        "_started",
        "_stats",
        "_stream",
        "_work",
        "_worker",
        "conn",
        "resend",
    )

    def __init__(
        self,
        proxy: Host,
        stats: RouteStats,
        started: float,
        request: Request,
        responder: Responder,
        worker: Worker,
        slot: Slot,
        extra: Headers,
        stream: bool,
        work: int,
    ) -> None:
        self._proxy = proxy
        self._stats = stats
        self._started = started
        self._request = request
        self._responder = responder
        self._worker = worker
        self._slot = slot
        self._extra = extra
        self._stream = stream
        self._work = work  # the worker's share of it, given back with the in-flight count
        self.conn: Abandonable | None = None  # until the head arrives: abandoned if the client leaves
        # Set where a listener may be told UpstreamUnreachable (h2c): to try another worker.
        self.resend: Resend | None = None

    # -- upstream.ResponseListener ---------------------------------------------------------
    def takes_raw(self) -> bool:
        # A stream is relayed event by event, never as it came (its head lists chunked).
        return not self._stream and self._responder.takes_as_is

    def on_response(self, response: StreamedResponse) -> None:
        self.conn = None
        responder = self._responder
        responder.on_disconnect(None)
        worker = self._worker
        timing = self._proxy.metrics.timing[worker.protocol]
        waited = perf_counter() - self._started
        timing.first_byte.observe(waited)
        answer: bytes | None = None
        status = response.status
        if isinstance(response, H1Response):
            # An answer that came whole and needs no change of its head goes to an HTTP/1.1
            # client as the worker wrote it (no header list encoded again).
            if responder.takes_as_is:
                answer = response.as_is(self._proxy.h1_lines(self._extra))
            if answer is None:
                complete = response.buffered_body()
                headers = response.read_fields()
            else:
                complete = b""
                headers = response.headers  # unlisted if lean: read_fields below if unsent
        else:
            headers = response.headers
            complete = response.buffered_body()
            if complete is not None and len(complete) <= JOIN_BODY_MAX and responder.takes_as_is:
                # An h2c worker's complete answer to an HTTP/1.1 client: its head is encoded
                # once per header list (``Host.h1_head``), then framed and joined with the body.
                head = self._proxy.h1_head(status, headers, self._extra)
                if head is not None:
                    answer = b"".join((head, length_line(len(complete)), b"\r\n", complete))
        if complete is None:
            if responder.sends_now:
                extra = self._extra
                relayed = headers + extra if extra else headers
                sse = passes_through(relayed, self._stream)
                if sse >= 0:
                    # Streamed: relayed from the connection's callbacks, which own the slot and
                    # the in-flight count from now on.
                    self._relay_here(response, relayed, sse == 1)
                    return
            # Still on its way (a large answer): relay it in a task, as the task path
            # does; the task owns the slot and the in-flight count from now on.
            proxy = self._proxy
            relaying = relay_rest(
                proxy.loop,
                proxy.metrics,
                self._stats,
                self._started,
                responder,
                worker,
                self._slot,
                response,
                self._extra,
                self._stream,
                self._work,
            )
            try:
                spawn(proxy.loop, relaying, self._request, responder)
            except Exception:
                relaying.close()
                response.abort()
                worker.inflight -= 1
                worker.work -= self._work
                self._bug()
            return
        # In-flight first: nothing below may leave it counted (``_bug`` does not touch it).
        worker.inflight -= 1
        worker.work -= self._work
        try:
            if answer is None or not responder.respond_as_is(answer):
                if answer is not None and isinstance(response, H1Response):
                    # This client's answer needs a head of its own after all (h2c's body is
                    # already in ``complete``).
                    complete = response.buffered_body() or b""
                    headers = response.read_fields()
                extra = self._extra
                responder.respond(status, headers + extra if extra else headers, complete)
            if worker.consecutive_failures:  # record_success() only matters after failures
                worker.record_success()
            worker.outcomes.ok += 1
            timing.duration.observe(waited)  # the whole answer came with its head
        except Exception:
            self._bug()
            return
        self._slot.release()
        # The answer went out with its head: its end is when the head came (one clock read).
        self._stats.observe(status, waited, self._responder)

    def _relay_here(self, response: StreamedResponse, headers: Headers, sse: bool) -> None:
        proxy = self._proxy
        relay = StreamRelay(
            proxy.loop,
            proxy.metrics,
            self._stats,
            self._started,
            self._request,
            self._responder,
            self._worker,
            self._slot,
            response,
            sse,
            self._work,
        )
        relay.begin(headers)  # never raises: a bug in it answers 500 and gives everything back

    def on_failure(self, error: RouterError) -> None:
        self.conn = None
        responder = self._responder
        responder.on_disconnect(None)
        worker = self._worker
        worker.inflight -= 1
        worker.work -= self._work
        try:
            worker.record_failure()
            count_outcome(worker.outcomes, outcome_of(error))
            resend = self.resend
            if resend is not None and isinstance(error, UpstreamUnreachable):
                # Nothing reached the worker: another one may answer (SPEC §5), from a task.
                self._proxy.retry_elsewhere(
                    self._stats,
                    self._started,
                    self._request,
                    responder,
                    resend,
                    self._extra,
                    self._stream,
                    self._work,
                    self._slot,
                    worker,
                )
                return
            status = responder.answer_error(error, self._extra)
        except Exception:
            self._bug()
            return
        self._slot.release()
        self._stats.observe(status, perf_counter() - self._started, self._responder)

    # -- Responder.on_disconnect -----------------------------------------------------------
    def __call__(self) -> None:
        """The callback ``Proxy`` gives ``Responder.on_disconnect`` is the exchange itself:
        compiled, ``exchange.on_client_gone`` would make a bound method per request (~300
        instructions)."""
        self.on_client_gone()

    def on_client_gone(self) -> None:
        conn, self.conn = self.conn, None
        worker = self._worker
        worker.inflight -= 1
        worker.work -= self._work
        try:
            if conn is not None:
                conn.abandon()  # mid-exchange: the connection cannot be reused
            count_outcome(worker.outcomes, CLIENT_GONE)
            self._responder.abort()
        except Exception:
            self._bug()
            return
        self._slot.release()
        self._stats.observe(CLIENT_CLOSED, perf_counter() - self._started, self._responder)

    def _bug(self) -> None:
        """A callback failed: answer 500 (or abort), close the upstream exchange, give back
        the slot (``Slot.release`` is idempotent). The in-flight count is the caller's."""
        _log.exception("forwarding failed for %r", self._request)
        answer_internal_error(self._responder)
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.abandon()
        self._slot.release()
