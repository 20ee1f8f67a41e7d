"""Forwarding a routed request (SPEC §5): admission -> pick a worker -> forward -> relay.

With a free slot and an idle HTTP/1.1 connection (or an h2c one with a free stream) to the picked
worker the request is written at once and answered from the connection's callbacks (``exchange``,
no task); anything else (queueing, connecting, retries) runs as the request's task. A small
complete answer goes back in one write; the rest is relayed by ``relay`` (SPEC §5).

Retries: only ``UpstreamUnreachable`` (the request bytes never reached a worker) is retried, on
another worker, at most ``retry_attempts`` tries in all, with jittered backoff (SPEC §5).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from dataplane.errors import (
    NoHealthyWorkers,
    RouterError,
    UpstreamBodyIncomplete,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from dataplane.http import DEFERRED, Deferred, Request, Responder, spawn
from dataplane.router.admission import Admission, Slot
from dataplane.router.balancer import Balancer
from dataplane.router.body import RequestBody
from dataplane.router.fleet.workers import Worker
from dataplane.router.headers import Forwarded, Headers, end_to_end
from dataplane.router.metrics import (
    CLIENT_GONE,
    UNREACHABLE,
    RouterMetrics,
    RouteStats,
    count_outcome,
)
from dataplane.router.path.exchange import Exchange, Host, Resend
from dataplane.router.path.relay import CLIENT_CLOSED, outcome_of, relay
from dataplane.router.upstream.h1.pool import H1Pool
from dataplane.router.upstream.h2c.pool import H2Pool


def forwarded_headers(request: Request, judged: bool) -> Forwarded:
    """The request's headers as a worker gets them (``headers.end_to_end``; a judged body that
    is content-coded is refused there, before admission, SPEC §5.1), or the client's fields as
    lines when the front door found nothing in them to drop or refuse (``Request.lines``). A
    request that came over h2 holds no field with CR, LF or NUL in its name or value (one that
    could smuggle a header line to an HTTP/1.1 worker): the h2 front door answers it 400 as
    malformed before any handler sees it (``h2_fields``, RFC 9113 §8.2.1), so nothing is
    filtered here."""
    lines = request.lines
    if lines is not None:
        return lines
    return end_to_end(request.headers, judged=judged)


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    request_timeout_s: float
    retry_attempts: int = 3
    retry_backoff_s: float = 0.01


class Forwarder(Host):
    """Base of ``Proxy``: forwards what ``Proxy.handle`` routed and judged (``_send``).

    A base class rather than an object of its own: ``handle`` reaches ``_send`` on every
    forwarded request, and one more attribute hop there would cost on the hot path.
    """

    def __init__(
        self,
        admission: Admission,
        balancer: Balancer[Worker],
        metrics: RouterMetrics,
        config: ProxyConfig,
    ) -> None:
        self._admission = admission
        self._balancer = balancer
        self._metrics = metrics
        self.metrics = metrics  # a plain attribute (not a property): read by every exchange
        self._config = config
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop or self._bind_loop()

    def _send(
        self,
        stats: RouteStats,
        started: float,
        request: Request,
        responder: Responder,
        target: bytes,
        body: RequestBody,
        headers: Forwarded,
        group: tuple[Worker, ...],
        extra: Headers,
        stream: bool,
        work: int,
    ) -> Coroutine[Any, Any, None] | Deferred:
        """The fast path: a free slot and an idle HTTP/1.1 connection (or an h2c one with a free
        stream) to the picked worker; the request is written now and the answer handled by
        callbacks (``exchange``). Anything else (queueing, connecting, retrying) goes on as the
        request's task (``_run``).
        ``work``: the request's (``balancer.request_work``), held by the worker while in flight.
        """
        slot = self._admission.try_acquire()
        if slot is None:
            return self._run(
                stats, started, request, responder, target, body, headers, group, extra, stream, work
            )
        if len(group) == 1:
            worker = group[0]
            if not worker.healthy:
                return self._run(
                    stats,
                    started,
                    request,
                    responder,
                    target,
                    body,
                    headers,
                    group,
                    extra,
                    stream,
                    work,
                    slot,
                )
        else:
            candidates = [w for w in group if w.healthy]
            if not candidates:
                return self._run(
                    stats,
                    started,
                    request,
                    responder,
                    target,
                    body,
                    headers,
                    group,
                    extra,
                    stream,
                    work,
                    slot,
                )
            worker = self._balancer.pick(candidates) if len(candidates) > 1 else candidates[0]
        pool = worker.pool
        if not isinstance(pool, (H1Pool, H2Pool)):  # both can start an exchange with no task
            return self._run(
                stats,
                started,
                request,
                responder,
                target,
                body,
                headers,
                group,
                extra,
                stream,
                work,
                slot,
                worker,
            )
        responder.upstream = worker.url
        exchange = Exchange(self, stats, started, request, responder, worker, slot, extra, stream, work)
        worker.inflight += 1
        worker.work += work
        try:
            conn = pool.start(
                request.method,
                target,
                headers,
                body,
                timeout_s=self._config.request_timeout_s,
                listener=exchange,
            )
        except UpstreamUnreachable:
            # A pooled connection found closed: nothing reached the worker, retry (SPEC §5).
            worker.inflight -= 1
            worker.work -= work
            worker.record_failure()
            count_outcome(worker.outcomes, UNREACHABLE)
            return self._run(
                stats,
                started,
                request,
                responder,
                target,
                body,
                headers,
                group,
                extra,
                stream,
                work,
                slot,
                worker,
                True,
            )
        except BaseException:
            worker.inflight -= 1
            worker.work -= work
            slot.release()
            raise
        if conn is None:  # nothing idle: connect in the task
            worker.inflight -= 1
            worker.work -= work
            return self._run(
                stats,
                started,
                request,
                responder,
                target,
                body,
                headers,
                group,
                extra,
                stream,
                work,
                slot,
                worker,
            )
        exchange.conn = conn
        if type(pool) is H2Pool:  # a refused stream may end in UpstreamUnreachable (RFC 9113 §8.7)
            exchange.resend = (target, body, headers, group)
        responder.on_disconnect(exchange)  # its ``__call__``: ``on_client_gone``
        return DEFERRED

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
        target, body, headers, group = resend
        forwarding = self._run(
            stats,
            started,
            request,
            responder,
            target,
            body,
            headers,
            group,
            extra,
            stream,
            work,
            slot,
            worker,
            True,
        )
        spawn(self._loop or self._bind_loop(), forwarding, request, responder)

    async def _run(
        self,
        stats: RouteStats,
        started: float,
        request: Request,
        responder: Responder,
        target: bytes,
        body: RequestBody,
        headers: Forwarded,
        group: tuple[Worker, ...],
        extra: Headers,
        stream: bool,
        work: int,
        slot: Slot | None = None,
        first: Worker | None = None,
        unreachable: bool = False,
    ) -> None:
        """Admission, forwarding and relaying, as the request's task.

        ``slot``: already taken by ``_send``; ``first``: the worker ``_send`` picked (to be tried
        first, so the balancer's choice stands), ``unreachable``: ``_send`` found it unreachable.

        A client that goes away cancels the task at once (``Responder.on_disconnect``, called
        synchronously by the server): cancellation removes a queued request from the queue,
        aborts the upstream exchange (h1: connection closed, h2: RST_STREAM), and the ``finally``
        blocks give back the slot and the in-flight count.
        """
        # current_task(loop) skips get_running_loop() (a getpid() syscall per call on 3.11).
        task = asyncio.current_task(self._loop or self._bind_loop())
        assert task is not None
        responder.on_disconnect(task.cancel)
        try:
            if slot is None:
                slot = self._admission.try_acquire()
            if slot is None:
                try:
                    slot = await self._admission.acquire()
                except RouterError as err:
                    slot = None
                    status = responder.answer_error(err, extra)
            if slot is not None:
                try:
                    status = await self._forward(
                        started,
                        request,
                        responder,
                        target,
                        body,
                        headers,
                        group,
                        extra,
                        stream,
                        work,
                        first,
                        unreachable,
                    )
                finally:
                    slot.release()
        except asyncio.CancelledError:
            if not responder.disconnected:
                raise
            # The client went away: nobody to answer; close the answer quietly.
            responder.abort()
            status = CLIENT_CLOSED
        finally:
            responder.on_disconnect(None)
        stats.observe(status, perf_counter() - started, responder)

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        self._loop = asyncio.get_running_loop()
        return self._loop

    # -- forwarding ------------------------------------------------------------------------
    async def _forward(
        self,
        started: float,
        request: Request,
        responder: Responder,
        target: bytes,
        body: RequestBody,
        headers: Forwarded,
        group: Sequence[Worker],
        extra: Headers,
        stream: bool,
        work: int,
        first: Worker | None = None,
        unreachable: bool = False,
    ) -> int:
        config = self._config
        metrics = self._metrics
        tried: list[Worker] = []
        if first is not None and unreachable:  # the first try (``_send``) failed
            tried.append(first)
            first = None
            if len(tried) >= config.retry_attempts:
                return responder.answer_error(UpstreamUnreachable(), extra)
            await asyncio.sleep(random.uniform(0, config.retry_backoff_s * 2))
        while True:
            if first is not None:  # picked by ``_send`` a moment ago
                worker, first = first, None
            else:
                if tried:
                    candidates = [w for w in group if w.healthy and w not in tried]
                else:
                    candidates = [w for w in group if w.healthy]
                if not candidates:
                    err = UpstreamUnreachable() if tried else NoHealthyWorkers()
                    return responder.answer_error(err, extra)
                worker = self._balancer.pick(candidates) if len(candidates) > 1 else candidates[0]
            responder.upstream = worker.url
            worker.inflight += 1
            worker.work += work
            try:
                response = await worker.pool.request(
                    request.method, target, headers, body, timeout_s=config.request_timeout_s
                )
            except UpstreamUnreachable as refused:
                worker.inflight -= 1
                worker.work -= work
                worker.record_failure()
                count_outcome(worker.outcomes, UNREACHABLE)
                tried.append(worker)
                if len(tried) >= config.retry_attempts:
                    return responder.answer_error(refused, extra)
                # Full jitter: routers retrying together must not hit the next worker in step.
                await asyncio.sleep(random.uniform(0, config.retry_backoff_s * (1 << len(tried))))
                continue
            except (UpstreamTimeout, UpstreamBodyIncomplete) as failed:
                worker.inflight -= 1
                worker.work -= work
                worker.record_failure()
                count_outcome(worker.outcomes, outcome_of(failed))
                return responder.answer_error(failed, extra)
            except BaseException:
                worker.inflight -= 1
                worker.work -= work
                count_outcome(worker.outcomes, CLIENT_GONE)
                raise
            timing = metrics.timing[worker.protocol]
            waited = perf_counter() - started
            timing.first_byte.observe(waited)
            complete = response.buffered_body()
            if complete is not None:  # the small-answer fast path: no relay coroutine
                worker.inflight -= 1
                worker.work -= work
                responder.respond(
                    response.status, response.headers + extra if extra else response.headers, complete
                )
                worker.record_success()
                worker.outcomes.ok += 1
                timing.duration.observe(waited)  # the whole answer came with its head
                return response.status
            try:
                status = await relay(self._metrics, responder, worker, response, extra, stream)
                timing.duration.observe(perf_counter() - started)
                return status
            finally:
                worker.inflight -= 1
                worker.work -= work
