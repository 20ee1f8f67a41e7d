"""Relaying a worker's answer to the client, and the SPEC §5 error answer (the request path's
last step, shared by the task path in ``proxy`` and the callback path in ``exchange``).

A non-streaming answer still on its way is collected up to ``BUFFER_NON_STREAMING`` bytes (so a
worker dying midway can still be answered with a clean 502 envelope), beyond that it is
streamed; an SSE answer is forwarded chunk by chunk as it arrives. A worker failing after the
head went out ends an SSE stream with a final ``error`` event and breaks any other answer.
"""

from __future__ import annotations

import asyncio
from time import perf_counter
from typing import Final

from dataplane.errors import (
    RouterError,
    UpstreamBodyIncomplete,
    UpstreamTimeout,
    sse_error_event,
)
from dataplane.http import ClientDisconnected, Responder
from dataplane.router.admission import Slot
from dataplane.router.fleet.workers import Worker
from dataplane.router.headers import Headers
from dataplane.router.metrics import BODY_INCOMPLETE, CLIENT_GONE, OK, TIMEOUT, RouterMetrics, RouteStats
from dataplane.router.upstream.base import UpstreamResponse

BUFFER_NON_STREAMING: Final = 1 << 20
CLIENT_CLOSED: Final = 499  # nginx's status for "client went away"; only ever a metrics label
_EVENT_STREAM: Final = b"text/event-stream"
# Ollama's streams (/api/chat, /api/generate): one JSON object per line, as they are made.
_NDJSON: Final = b"application/x-ndjson"


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
    content_type = next((v for n, v in headers if n == b"content-type"), b"")
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
        metrics.upstream_outcome(worker.url, worker.protocol, CLIENT_GONE)
        return CLIENT_CLOSED
    except (UpstreamBodyIncomplete, UpstreamTimeout) as failed:
        worker.record_failure()
        metrics.upstream_outcome(worker.url, worker.protocol, outcome_of(failed))
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
        metrics.upstream_outcome(worker.url, worker.protocol, CLIENT_GONE)
        raise
    worker.record_success()
    metrics.upstream_outcome(worker.url, worker.protocol, OK)
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
