"""The request path (SPEC §3.3, §5; issue 6 item 2).

Judged endpoints: read body -> probe -> model lookup -> enforce the contract (inject / reject /
allow) -> THEN admission -> pick a worker -> forward -> relay the answer. A request refused by
the contract (or malformed, or for an unknown model) never takes a queue slot or reaches a
worker. Other ``POST /v1/*`` paths skip the contract and go through the same admission and
forwarding. The GET surface lives in ``endpoints``.

Forwarding: with a free slot and an idle HTTP/1.1 connection to the picked worker the request is
written at once and answered from the connection's callbacks (``exchange``, no task); anything
else (queueing, connecting, h2c workers, retries) runs as the request's task. A small complete
answer goes back in one write; the rest is relayed by ``relay`` (SPEC §5).

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

from dataplane.http import DEFERRED, Deferred, Request, Responder
from dataplane.router.admission import Admission, Slot
from dataplane.router.balancer import Balancer
from dataplane.router.endpoints import Endpoints
from dataplane.router.enforce import enforce
from dataplane.router.errors import (
    BadRequest,
    ContractUnavailable,
    MethodNotAllowed,
    ModelNotFound,
    NoHealthyWorkers,
    RouteNotFound,
    RouterError,
    SamplingContractViolation,
    UpstreamBodyIncomplete,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from dataplane.router.exchange import Exchange
from dataplane.router.headers import Headers, end_to_end, without_control_chars
from dataplane.router.metrics import (
    CLIENT_GONE,
    OK,
    UNREACHABLE,
    RouterMetrics,
    RouteStats,
)
from dataplane.router.probe import probe_body
from dataplane.router.relay import CLIENT_CLOSED, answer_error, outcome_of, relay
from dataplane.router.request_body import RequestBody
from dataplane.router.routes import JUDGED, canonical_path, split_target
from dataplane.router.state import RouterState
from dataplane.router.upstream_h1 import H1Pool
from dataplane.router.workers import Worker

_MAX_MODEL_IN_MESSAGE = 200
_MAX_ROUTES = 1024
# canonical path, target to forward a judged request with, /generate, stats if judged
_Route = tuple[bytes, bytes, bool, "RouteStats | None"]
_NONE: Headers = []  # no extra headers (never mutated)
# RFC 9110 §15.5.6: a 405 names the methods the resource supports.
_ALLOW_POST: Headers = [(b"allow", b"POST")]
_ALLOW_GET: Headers = [(b"allow", b"GET, HEAD")]


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    request_timeout_s: float
    retry_attempts: int = 3
    retry_backoff_s: float = 0.01


class Proxy:
    """The router's HTTP handler: ``await proxy.handle(request, responder)``."""

    def __init__(
        self,
        state: RouterState,
        admission: Admission,
        balancer: Balancer[Worker],
        metrics: RouterMetrics,
        config: ProxyConfig,
    ) -> None:
        self._state = state
        self._admission = admission
        self._balancer = balancer
        self._metrics = metrics
        self.metrics = metrics  # a plain attribute (not a property): read by every exchange
        self._config = config
        self._endpoints = Endpoints(state, metrics)
        self._other_stats = metrics.route("/v1/*")
        self._unknown_stats = metrics.route("other")
        self._judged_stats = {path: metrics.route(path.decode()) for path in JUDGED}
        self._loop: asyncio.AbstractEventLoop | None = None
        # Request target -> its route (clients repeat a handful of targets; bounded).
        self._routes: dict[bytes, _Route] = {}

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop or self._bind_loop()

    def handle(self, request: Request, responder: Responder) -> Coroutine[Any, Any, None] | Deferred | None:
        """Answer at once (refusals, GET surface), forward through callbacks (``DEFERRED``), or
        return the forwarding coroutine (queueing, connecting, h2c workers, retries).

        The HTTP server runs a returned coroutine as the request's task (``dataplane.http``).
        """
        started = perf_counter()
        route = self._routes.get(request.path)
        if route is None:
            route = self._route(request.path)
        path, target, generate, judged_stats = route
        method = request.method
        if judged_stats is not None:
            stats = judged_stats
            if method != b"POST":
                status = answer_error(responder, MethodNotAllowed(), _ALLOW_POST)
            else:
                judged = self._judge(request, responder, generate)
                if isinstance(judged, int):
                    status = judged
                else:
                    body, group, extra, stream = judged
                    return self._send(stats, started, request, responder, target, body, group, extra, stream)
        elif (endpoint := self._endpoints.get(path)) is not None and (
            method == b"GET" or method == b"HEAD"  # HEAD: the server sends the head only
        ):
            stats, answer = endpoint
            answered = answer(responder)
            if not isinstance(answered, int):  # /metrics of a --processes router (process_metrics)
                return self._answer_later(stats, started, answered)
            status = answered
        elif method == b"POST" and path.startswith(b"/v1/"):
            stats = self._other_stats
            try:
                _, group = self._group(_model_of(request.body))
            except RouterError as err:
                status = answer_error(responder, err, _NONE)
            else:
                return self._send(
                    stats, started, request, responder, request.path, request.body, group, _NONE, False
                )
        elif endpoint is not None:  # a GET endpoint asked with another method
            stats = endpoint[0]
            status = answer_error(responder, MethodNotAllowed(), _ALLOW_GET)
        else:
            stats = self._unknown_stats
            status = answer_error(responder, RouteNotFound(), _NONE)
        stats.observe(status, perf_counter() - started)
        return None

    async def _answer_later(
        self, stats: RouteStats, started: float, answer: Coroutine[Any, Any, int]
    ) -> None:
        stats.observe(await answer, perf_counter() - started)

    def _route(self, target: bytes) -> _Route:
        """Classify a request target (``routes``): canonical path, the target to forward a
        judged request with, whether fields live under ``sampling_params``, judged stats."""
        path, query = split_target(target)
        path = canonical_path(path)
        generate = JUDGED.get(path)
        route = (
            path,
            path + query,
            generate is True,
            self._judged_stats[path] if generate is not None else None,
        )
        routes = self._routes
        if len(routes) >= _MAX_ROUTES:
            routes.clear()  # a client cycling targets only makes it start over
        routes[target] = route
        return route

    def _judge(
        self, request: Request, responder: Responder, generate: bool
    ) -> int | tuple[RequestBody, tuple[Worker, ...], Headers, bool]:
        """Probe, model lookup, contract (SPEC §3.3): the body to forward, or the status answered."""
        contracts = self._state.contracts
        if contracts is None:
            return answer_error(responder, ContractUnavailable(), _NONE)
        extra = contracts.revision_headers
        try:
            probe = probe_body(request.body, generate=generate)
            model, group = self._group(probe.model)
            body: RequestBody = request.body
            compiled = contracts.for_model(model)
            if compiled is not None:
                try:
                    body = enforce(compiled, probe, request.body)
                except SamplingContractViolation as violation:
                    self._state.count_rejection(
                        compiled.scope, violation.violated or (violation.param or "",)
                    )
                    raise
        except RouterError as err:
            return answer_error(responder, err, extra)
        return body, group, extra, probe.stream is True

    def _send(
        self,
        stats: RouteStats,
        started: float,
        request: Request,
        responder: Responder,
        target: bytes,
        body: RequestBody,
        group: tuple[Worker, ...],
        extra: Headers,
        stream: bool,
    ) -> Coroutine[Any, Any, None] | Deferred:
        """The fast path: a free slot and an idle HTTP/1.1 connection to the picked worker; the
        request is written now and the answer handled by callbacks (``exchange``). Anything
        else (queueing, connecting, h2c, retrying) goes on as the request's task (``_run``).
        """
        slot = self._admission.try_acquire()
        if slot is None:
            return self._run(stats, started, request, responder, target, body, group, extra, stream)
        if len(group) == 1:
            worker = group[0]
            if not worker.healthy:
                return self._run(stats, started, request, responder, target, body, group, extra, stream, slot)
        else:
            candidates = [w for w in group if w.healthy]
            if not candidates:
                return self._run(stats, started, request, responder, target, body, group, extra, stream, slot)
            worker = self._balancer.pick(candidates) if len(candidates) > 1 else candidates[0]
        pool = worker.pool
        if not isinstance(pool, H1Pool):
            return self._run(
                stats, started, request, responder, target, body, group, extra, stream, slot, worker
            )
        headers = end_to_end(request.headers)
        if request.http2:
            headers = without_control_chars(headers)
        exchange = Exchange(self, stats, started, request, responder, worker, slot, extra, stream)
        worker.inflight += 1
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
            worker.record_failure()
            self._metrics.upstream_outcome(worker.url, worker.protocol, UNREACHABLE)
            return self._run(
                stats, started, request, responder, target, body, group, extra, stream, slot, worker, True
            )
        except BaseException:
            worker.inflight -= 1
            slot.release()
            raise
        if conn is None:  # nothing idle: connect in the task
            worker.inflight -= 1
            return self._run(
                stats, started, request, responder, target, body, group, extra, stream, slot, worker
            )
        exchange.conn = conn
        responder.on_disconnect(exchange.on_client_gone)
        return DEFERRED

    async def _run(
        self,
        stats: RouteStats,
        started: float,
        request: Request,
        responder: Responder,
        target: bytes,
        body: RequestBody,
        group: tuple[Worker, ...],
        extra: Headers,
        stream: bool,
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
                    status = answer_error(responder, err, extra)
            if slot is not None:
                try:
                    status = await self._forward(
                        request, responder, target, body, group, extra, stream, first, unreachable
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
        stats.observe(status, perf_counter() - started)

    def _bind_loop(self) -> asyncio.AbstractEventLoop:
        self._loop = asyncio.get_running_loop()
        return self._loop

    def _group(self, model: str | None) -> tuple[str, tuple[Worker, ...]]:
        workers = self._state.workers
        if not workers.models:
            raise NoHealthyWorkers()  # no worker at all: nothing could take any model
        if model is None:
            model = workers.sole_model
            if model is None:
                raise BadRequest("model is required: this router serves several models")
        group = workers.by_model.get(model)
        if group is None:
            shown = model if len(model) <= _MAX_MODEL_IN_MESSAGE else model[:_MAX_MODEL_IN_MESSAGE] + "…"
            raise ModelNotFound(f"no worker serves the model '{shown}'")
        return model, group

    # -- forwarding ------------------------------------------------------------------------
    async def _forward(
        self,
        request: Request,
        responder: Responder,
        target: bytes,
        body: RequestBody,
        group: Sequence[Worker],
        extra: Headers,
        stream: bool,
        first: Worker | None = None,
        unreachable: bool = False,
    ) -> int:
        headers = end_to_end(request.headers)
        if request.http2:
            headers = without_control_chars(headers)
        config = self._config
        metrics = self._metrics
        tried: list[Worker] = []
        if first is not None and unreachable:  # the first try (``_send``) failed
            tried.append(first)
            first = None
            if len(tried) >= config.retry_attempts:
                return answer_error(responder, UpstreamUnreachable(), extra)
            await asyncio.sleep(random.uniform(0, config.retry_backoff_s * 2))
        while True:
            if first is not None:  # picked by ``_send`` a moment ago
                worker, first = first, None
            else:
                if tried:
                    candidates: Sequence[Worker] = [w for w in group if w.healthy and w not in tried]
                else:
                    candidates = [w for w in group if w.healthy]
                if not candidates:
                    err = UpstreamUnreachable() if tried else NoHealthyWorkers()
                    return answer_error(responder, err, extra)
                worker = self._balancer.pick(candidates) if len(candidates) > 1 else candidates[0]
            worker.inflight += 1
            try:
                response = await worker.pool.request(
                    request.method, target, headers, body, timeout_s=config.request_timeout_s
                )
            except UpstreamUnreachable as refused:
                worker.inflight -= 1
                worker.record_failure()
                metrics.upstream_outcome(worker.url, worker.protocol, UNREACHABLE)
                tried.append(worker)
                if len(tried) >= config.retry_attempts:
                    return answer_error(responder, refused, extra)
                # Full jitter: routers retrying together must not hit the next worker in step.
                await asyncio.sleep(random.uniform(0, config.retry_backoff_s * (1 << len(tried))))
                continue
            except (UpstreamTimeout, UpstreamBodyIncomplete) as failed:
                worker.inflight -= 1
                worker.record_failure()
                metrics.upstream_outcome(worker.url, worker.protocol, outcome_of(failed))
                return answer_error(responder, failed, extra)
            except BaseException:
                worker.inflight -= 1
                metrics.upstream_outcome(worker.url, worker.protocol, CLIENT_GONE)
                raise
            complete = response.buffered_body()
            if complete is not None:  # the small-answer fast path: no relay coroutine
                worker.inflight -= 1
                responder.respond(
                    response.status, response.headers + extra if extra else response.headers, complete
                )
                worker.record_success()
                metrics.upstream_outcome(worker.url, worker.protocol, OK)
                return response.status
            try:
                return await relay(self._metrics, responder, worker, response, extra, stream)
            finally:
                worker.inflight -= 1


def _model_of(body: bytes) -> str | None:
    """The ``model`` of an unjudged body, if it is a JSON object that names one."""
    try:
        return probe_body(body).model
    except BadRequest:
        return None  # not a JSON object (e.g. an upload): routable only in a one-model fleet
