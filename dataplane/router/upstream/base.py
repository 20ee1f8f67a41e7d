"""The upstream interface: what the request path needs from a worker connection pool.

One ``UpstreamPool`` per worker, one implementation per wire protocol: ``upstream.h1.pool`` (HTTP/1.1
keep-alive pool) and ``upstream.h2c.pool`` (h2c, multiplexed). The proxy only sees these Protocols, so
the protocol of a worker is chosen in exactly one place (``workers.make_pool``).

Failures are grouped by what the caller does next (ARCHITECTURE: "exceptions grouped by what
the caller does next", translated at the adapter): ``UpstreamUnreachable`` means the request
bytes never reached the worker, so retrying on another worker is safe (SPEC §5); the two others
mean the worker may have acted on the request, so it is never retried. Library exceptions
(``OSError``, ``h2.exceptions``, ``httptools`` errors) never leak past an implementation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from mypy_extensions import mypyc_attr

from dataplane.errors import RouterError, UpstreamBodyIncomplete, UpstreamTimeout, UpstreamUnreachable
from dataplane.router.body import RequestBody
from dataplane.router.headers import Forwarded

__all__ = [
    "BodySink",
    "ResponseListener",
    "StreamedResponse",
    "UpstreamBodyIncomplete",
    "UpstreamPool",
    "UpstreamResponse",
    "UpstreamTimeout",
    "UpstreamTimeouts",
    "UpstreamUnreachable",
]

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class UpstreamTimeouts:
    """Deadlines of an exchange besides the whole-exchange ``timeout_s`` (SPEC §5), each
    an ``UpstreamTimeout`` (504, a worker failure for ejection) when it passes.

    ``first_byte_s``: from sending the request to the worker's response head. For a non-streaming
    completion the head comes with the whole answer, so this also bounds the longest generation
    answered in one piece: 5 minutes. ``idle_s``: no byte from the worker for that long while its
    answer is relayed (SSE streams: between tokens, and before the first one after the head);
    time in which the router itself holds bytes back from a slow client does not count. 2
    minutes: twice nginx's ``proxy_read_timeout`` default, room for queueing before a first token.
    A worker that hangs (SIGSTOP, deadlock) is caught sooner by the active ``/health`` checks,
    which then fail its stalled exchanges (``fail_stalled``).
    """

    first_byte_s: float = 300.0
    idle_s: float = 120.0


class UpstreamResponse(Protocol):
    """A worker's answer whose head has arrived; the body may still be on its way."""

    status: int
    # Lower-case names, hop-by-hop headers (RFC 9110 §7.6.1) and framing headers
    # (Content-Length, Transfer-Encoding) removed: the front door frames the answer itself.
    headers: Headers

    def buffered_body(self) -> bytes | None:
        """The whole body if it had completely arrived already, else ``None``.

        The small-answer fast path: a complete non-streaming answer goes back to the client in
        one write, without iterating ``chunks()``. After a non-``None`` result the response is
        finished (nothing to abort, the connection is already reusable).
        """
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """Body chunks as they arrive (SSE events are not coalesced or delayed).

        Raises ``UpstreamBodyIncomplete`` if the worker drops the answer midway and
        ``UpstreamTimeout`` past the request deadline. Iterate at most once.
        """
        ...

    def abort(self) -> None:
        """The client went away: stop the answer (h1: close the connection, never reuse it;
        h2: RST_STREAM). Idempotent, and a no-op once the answer is complete."""
        ...


# Test sinks are interpreted subclasses (compiled, the relay's own calls stay vtable calls).
@mypyc_attr(allow_interpreted_subclasses=True)
class BodySink:
    """Takes a streamed answer's body straight from the upstream connection's callbacks
    (``H1Response.relay_to``): no future per chunk, no task, no iterator (``path.relay.StreamRelay``).

    Called from the connection's ``data_received`` (one ``on_body`` per read: what one read
    brought, joined), ``connection_lost`` and the deadline timer, so it must not raise and must not
    block; it holds the worker back with the response's ``pause()``/``resume()`` (backpressure).
    Exactly one of ``on_end``/``on_error`` ends it, unless its owner aborted the response first.

    A base class rather than a Protocol: compiled (scripts/build_mypyc.sh), its calls are vtable
    calls, not lookups by name.
    """

    def on_body(self, chunk: bytes) -> None:
        """Body bytes (non-empty), in order."""
        raise NotImplementedError

    def on_end(self, last: bytes) -> None:
        """The body is complete; ``last``: what the read that completed it brought (may be
        empty), so that the sink can send it and its own end in one write."""
        raise NotImplementedError

    def on_error(self, error: RouterError) -> None:
        """The answer failed midway (``UpstreamBodyIncomplete`` or ``UpstreamTimeout``)."""
        raise NotImplementedError


# Test answers are interpreted subclasses (compiled, the exchange's own calls stay vtable calls).
@mypyc_attr(allow_interpreted_subclasses=True)
class StreamedResponse:
    """An answer a callback-driven exchange is told of (``ResponseListener``), whose body can be
    handed to a ``BodySink`` from its connection's callbacks (``path.relay.StreamRelay``):
    ``H1Response`` and the h2c upstream's ``H2Stream`` extend it (each an ``UpstreamResponse``).

    A base class rather than a Protocol, for the reason ``BodySink`` gives.
    """

    __slots__ = ()

    status: int
    headers: Headers

    def buffered_body(self) -> bytes | None:
        """``UpstreamResponse.buffered_body``."""
        raise NotImplementedError

    def chunks(self) -> AsyncIterator[bytes]:
        """``UpstreamResponse.chunks``."""
        raise NotImplementedError

    def arrived(self) -> bytes:
        """The body bytes that have arrived and not been taken yet (sent with the head)."""
        raise NotImplementedError

    def relay_to(self, sink: BodySink) -> None:
        """From now on the body goes to ``sink`` as it arrives (instead of ``chunks()``); what
        already arrived, and the end or the failure if it came, at once. At most once."""
        raise NotImplementedError

    def pause(self) -> None:
        """The sink's client is not taking bytes: hold the worker back until ``resume`` (the
        time paused is the router's wait: no idle deadline runs out meanwhile)."""
        raise NotImplementedError

    def resume(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        """The sink's client went away (``UpstreamResponse.abort``)."""
        raise NotImplementedError


# Test listeners are interpreted subclasses.
@mypyc_attr(allow_interpreted_subclasses=True)
class ResponseListener:
    """Told how a callback-driven exchange (``H1Pool.start``, ``H2Pool.start``) went, exactly
    once, with no task.

    Called from the connection's own callbacks (``data_received``, ``connection_lost``, the
    deadline timer), so it must not raise and must not block. A base class rather than a
    Protocol, for the reason ``BodySink`` gives.
    """

    __slots__ = ()

    def on_response(self, response: StreamedResponse) -> None:
        """The head arrived (``buffered_body()`` says whether the body did too)."""
        raise NotImplementedError

    def takes_raw(self) -> bool:
        """Whether the answer will go to an HTTP/1.1 client as the worker wrote it if it can
        (``H1Response.as_is``): an HTTP/1.1 connection then parses its head without listing
        its headers, and lists them only if it cannot (``H1Response.read_fields``)."""
        return False

    def on_failure(self, error: RouterError) -> None:
        """The exchange failed before the head arrived (``UpstreamTimeout`` or
        ``UpstreamBodyIncomplete``: the request bytes were written, so never retried)."""
        raise NotImplementedError


class UpstreamPool(Protocol):
    """The connections to one worker."""

    # Label for ``fleetplane_upstream_requests_total{protocol}``: ``"http1"`` or ``"h2c"``.
    protocol: str

    async def request(
        self,
        method: bytes,
        path: bytes,
        headers: Forwarded,
        body: RequestBody,
        *,
        timeout_s: float,
    ) -> UpstreamResponse:
        """Send one request and return once the response head has arrived.

        ``body`` is bytes or a ``SplicedBody`` (the client's bytes around an injection, SPEC
        §3.3): the pool sends ``bytes(body)`` without joining the segments first.

        ``headers`` are end-to-end request headers (lower-case names, no Host, no framing
        headers), or such field lines (``Forwarded``: as an HTTP/1.1 client sent them, or an h2
        client's fields in that form); the pool adds Host/``:authority`` and the body framing.
        ``timeout_s`` bounds the whole exchange, body included. Raises ``UpstreamUnreachable``
        (nothing reached the worker: safe to retry elsewhere), ``UpstreamTimeout``,
        ``UpstreamBodyIncomplete``.
        """
        ...

    def fail_stalled(self, since: float) -> int:
        """Fail with ``UpstreamTimeout`` every exchange that has had nothing from the worker since
        ``since`` (loop time) and is not waiting on the router's own client; how many."""
        ...

    async def close(self) -> None:
        """Close every connection; in-flight answers end with ``UpstreamBodyIncomplete``."""
        ...
