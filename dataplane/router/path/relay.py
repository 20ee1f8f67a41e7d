"""Relaying a worker's answer to the client, and the SPEC §5 error answer (the request path's
last step, shared by the task path in ``proxy`` and the callback path in ``exchange``).

A non-streaming answer still on its way is collected up to ``BUFFER_NON_STREAMING`` bytes (so a
worker dying midway can still be answered with a clean 502 envelope), beyond that it is
streamed; an SSE answer is forwarded chunk by chunk as it arrives. A worker failing after the
head went out ends an SSE stream with a final ``error`` event and breaks any other answer.

A streamed (SSE, NDJSON) answer of a callback-driven exchange (HTTP/1.1 or h2c worker) to a
client whose responder ``sends_now`` is relayed by ``StreamRelay``: the upstream connection hands
each read's body bytes to it from ``data_received`` and it writes them to the client at once (one
write per upstream read, chunk framing included): no future, task step or coroutine chain per
chunk. Only a client that stops taking bytes costs a task (waiting for ``writable()``, the worker
held back meanwhile: upstream reading paused over HTTP/1.1, credit withheld over h2c).
Everything else (large non-streaming answers, the task path) goes through ``relay``.
"""

from __future__ import annotations

import asyncio
import logging
from time import perf_counter
from typing import Final

from dataplane.errors import (
    RouterError,
    UpstreamBodyIncomplete,
    UpstreamTimeout,
    sse_error_event,
)
from dataplane.http import ClientDisconnected, Request, Responder, answer_internal_error
from dataplane.router.admission import Slot
from dataplane.router.fleet.workers import Worker
from dataplane.router.headers import Headers
from dataplane.router.metrics import (
    BODY_INCOMPLETE,
    CLIENT_GONE,
    TIMEOUT,
    RouterMetrics,
    RouteStats,
    count_outcome,
)
from dataplane.router.upstream.base import BodySink, StreamedResponse, UpstreamResponse

BUFFER_NON_STREAMING: Final = 1 << 20
CLIENT_CLOSED: Final = 499  # nginx's status for "client went away"; only ever a metrics label
_EVENT_STREAM: Final = b"text/event-stream"
# Ollama's streams (/api/chat, /api/generate): one JSON object per line, as they are made.
_NDJSON: Final = b"application/x-ndjson"
_log = logging.getLogger(__name__)


def outcome_of(err: RouterError) -> str:
    """The ``fleetplane_upstream_requests_total{outcome}`` of a failed exchange."""
    return TIMEOUT if isinstance(err, UpstreamTimeout) else BODY_INCOMPLETE


async def relay(
    metrics: RouterMetrics,
    responder: Responder,
    worker: Worker,
    response: UpstreamResponse,
    extra: Headers,
    stream: bool,
) -> int:
    """Relay an answer whose head has arrived; the status recorded for it."""
    status = response.status
    headers = response.headers + extra if extra else response.headers
    content_type = _content_type(headers)
    sse = stream or content_type.startswith(_EVENT_STREAM)
    chunks = response.chunks()
    try:
        if not sse and not content_type.startswith(_NDJSON):
            parts: list[bytes] = []
            size = 0
            while size <= BUFFER_NON_STREAMING:
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    responder.respond(status, headers, b"".join(parts))
                    break
                parts.append(chunk)
                size += len(chunk)
            else:
                responder.start(status, headers)
                await responder.write(b"".join(parts))
        else:
            responder.start(status, headers)
        if not responder.finished:
            async for chunk in chunks:
                await responder.write(chunk)
            responder.end()
    except ClientDisconnected:
        response.abort()
        responder.abort()
        count_outcome(worker.outcomes, CLIENT_GONE)
        return CLIENT_CLOSED
    except (UpstreamBodyIncomplete, UpstreamTimeout) as failed:
        worker.record_failure()
        count_outcome(worker.outcomes, outcome_of(failed))
        if not responder.started:
            return responder.answer_error(failed, extra)
        if sse:
            try:
                await responder.write(sse_error_event(failed))
            except ClientDisconnected:
                responder.abort()
                return CLIENT_CLOSED
            responder.end()
        else:
            responder.abort()
        return failed.status
    except BaseException:
        response.abort()
        count_outcome(worker.outcomes, CLIENT_GONE)
        raise
    worker.record_success()
    worker.outcomes.ok += 1
    return status


async def relay_rest(
    loop: asyncio.AbstractEventLoop,
    metrics: RouterMetrics,
    stats: RouteStats,
    started: float,
    responder: Responder,
    worker: Worker,
    slot: Slot,
    response: UpstreamResponse,
    extra: Headers,
    stream: bool,
    work: int,
) -> None:
    """The rest of a callback-driven exchange whose answer is still on its way, as a task: it
    owns the slot and the in-flight count from the head on (the task path's ``_run``)."""
    task = asyncio.current_task(loop)
    assert task is not None
    responder.on_disconnect(task.cancel)
    try:
        try:
            status = await relay(metrics, responder, worker, response, extra, stream)
            metrics.timing[worker.protocol].duration.observe(perf_counter() - started)
        finally:
            worker.inflight -= 1
            worker.work -= work
            slot.release()
    except asyncio.CancelledError:
        if not responder.disconnected:
            raise
        responder.abort()  # the client went away: nobody to answer
        status = CLIENT_CLOSED
    finally:
        responder.on_disconnect(None)
    stats.observe(status, perf_counter() - started, responder)


def passes_through(headers: Headers, stream: bool) -> int:
    """How an answer still on its way is relayed: 1 as SSE (asked to stream, or
    ``text/event-stream``), 0 chunk by chunk without SSE (NDJSON), -1 collected first (``relay``)."""
    content_type = _content_type(headers)
    if stream or content_type.startswith(_EVENT_STREAM):
        return 1
    return 0 if content_type.startswith(_NDJSON) else -1


def _content_type(headers: Headers) -> bytes:
    for name, value in headers:
        if name == b"content-type":
            return value
    return b""


class StreamRelay(BodySink):
    """A streamed answer relayed from the upstream connection's callbacks (see the module
    docstring); it owns the slot and the in-flight count from the head on, as ``relay_rest`` does.

    Exactly one of ``on_end``, ``on_error``, the client leaving (``on_client_gone``, or a write
    timeout seen by ``_when_writable``) or a bug finishes it (``_open`` turns False): the slot,
    the in-flight count and the disconnect callback are given back there, the status counted.
    """

    __slots__ = (
        "_loop",
        "_metrics",
        "_open",
        "_request",
        "_responder",
        "_response",
        "_slot",
        "_sse",
        "_started",
        "_stats",
        "_status",
        "_waiting",
        "_work",
        "_worker",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        metrics: RouterMetrics,
        stats: RouteStats,
        started: float,
        request: Request,
        responder: Responder,
        worker: Worker,
        slot: Slot,
        response: StreamedResponse,
        sse: bool,
        work: int,
    ) -> None:
        self._loop = loop
        self._metrics = metrics
        self._stats = stats
        self._started = started
        self._request = request
        self._responder = responder
        self._worker = worker
        self._slot = slot
        self._response = response
        self._sse = sse
        self._work = work
        self._status = response.status
        self._open = True
        self._waiting: asyncio.Task[None] | None = None  # only while the client is not reading

    def begin(self, headers: Headers) -> None:
        """Send the head (with what came with it: one write) and take the body from the
        connection from now on."""
        responder = self._responder
        response = self._response
        try:
            more = responder.start_sending(self._status, headers, response.arrived())
            responder.on_disconnect(self)  # its ``__call__``: ``on_client_gone``
            if self._open:  # (a client already gone was finished by on_disconnect)
                response.relay_to(self)
                if not more and self._open and self._waiting is None:
                    self._hold()
        except ClientDisconnected:
            self._client_left()
        except Exception:
            self._bug()

    # -- BodySink --------------------------------------------------------------------------
    def on_body(self, chunk: bytes) -> None:
        if not self._open:
            return
        try:
            if not self._responder.send(chunk):
                self._hold()
        except ClientDisconnected:
            self._client_left()
        except Exception:
            self._bug()

    def _hold(self) -> None:
        """The client is not taking bytes: hold the worker back until it does."""
        self._response.pause()
        self._waiting = self._loop.create_task(self._when_writable())

    def on_end(self, last: bytes) -> None:
        if not self._open:
            return
        worker = self._worker
        try:
            self._responder.send_last(last)  # with the end: one write
            if worker.consecutive_failures:  # record_success() only matters after failures
                worker.record_success()
            worker.outcomes.ok += 1
            self._metrics.timing[worker.protocol].duration.observe(perf_counter() - self._started)
        except Exception:
            self._bug()
            return
        self._finish(self._status)

    def on_error(self, error: RouterError) -> None:
        if not self._open:
            return
        worker = self._worker
        responder = self._responder
        try:
            worker.record_failure()
            count_outcome(worker.outcomes, outcome_of(error))
            status = error.status
            if self._sse:  # SPEC §5: a final SSE error event ends the stream
                if responder.disconnected:
                    responder.abort()
                    status = CLIENT_CLOSED
                else:
                    responder.send_last(sse_error_event(error))
            else:
                responder.abort()  # the client must not take a broken answer for a complete one
            self._metrics.timing[worker.protocol].duration.observe(perf_counter() - self._started)
        except Exception:
            self._bug()
            return
        self._finish(status)

    # -- the client ------------------------------------------------------------------------
    def __call__(self) -> None:
        """The callback given to ``Responder.on_disconnect`` is the relay itself: compiled,
        ``self.on_client_gone`` would make a bound method per stream."""
        self.on_client_gone()

    def on_client_gone(self) -> None:
        """``Responder.on_disconnect``: stop the answer (the upstream connection is closed:
        RFC 9112 §9.6, the only way to cancel an h1 exchange), count 499."""
        if self._open:
            self._client_left()

    async def _when_writable(self) -> None:
        try:
            await self._responder.writable()
        except ClientDisconnected:  # gone, or not reading for write_timeout_s (killed)
            self._waiting = None
            if self._open:
                self._client_left()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            self._waiting = None
            self._bug()
            return
        self._waiting = None
        if self._open:
            self._response.resume()

    def _client_left(self) -> None:
        try:
            self._response.abort()
            self._responder.abort()
            worker = self._worker
            count_outcome(worker.outcomes, CLIENT_GONE)
        except Exception:
            self._bug()
            return
        self._finish(CLIENT_CLOSED)

    # -- the end -----------------------------------------------------------------------------
    def _finish(self, status: int) -> None:
        self._give_back()
        self._stats.observe(status, perf_counter() - self._started, self._responder)

    def _give_back(self) -> None:
        self._open = False
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            waiting.cancel()
        self._responder.on_disconnect(None)
        worker = self._worker
        worker.inflight -= 1
        worker.work -= self._work
        self._slot.release()

    def _bug(self) -> None:
        """A callback failed: break the answer, close the upstream exchange, give back the slot
        and the in-flight count (once)."""
        _log.exception("relaying failed for %r", self._request)
        if not self._open:
            return
        self._response.abort()
        answer_internal_error(self._responder)
        self._give_back()
