"""The request path (SPEC §3.3, §5; issue 6 item 2).

Judged endpoints: read body -> probe -> model lookup -> enforce the contract (inject / reject /
allow) -> THEN admission -> pick a worker -> forward -> relay the answer. A request refused by
the contract (or malformed, or for an unknown model) never takes a queue slot or reaches a
worker. Other ``POST /v1/*`` paths skip the contract and go through the same admission and
forwarding. The GET surface lives in ``endpoints``.

Forwarding, from admission on (the fast path through callbacks, the task path, retries), is the
base class's: ``forwarder.Forwarder``.
"""

from __future__ import annotations

from collections.abc import Coroutine
from time import perf_counter
from typing import Any

from dataplane.errors import (
    BadRequest,
    ContractUnavailable,
    MethodNotAllowed,
    ModelNotFound,
    NoHealthyWorkers,
    RouteNotFound,
    RouterError,
    SamplingContractViolation,
)
from dataplane.http import Deferred, Request, Responder
from dataplane.router.admission import Admission
from dataplane.router.balancer import Balancer
from dataplane.router.body import RequestBody
from dataplane.router.contract.enforce import enforce
from dataplane.router.contract.probe import probe_body
from dataplane.router.contract.routes import JUDGED, canonical_path, split_target
from dataplane.router.fleet.workers import Worker
from dataplane.router.headers import Headers
from dataplane.router.metrics import RouterMetrics, RouteStats
from dataplane.router.path.endpoints import Endpoints
from dataplane.router.path.forwarder import Forwarder, ProxyConfig
from dataplane.router.state import RouterState

_MAX_MODEL_IN_MESSAGE = 200
_MAX_ROUTES = 1024
# canonical path, target to forward a judged request with, /generate, stats if judged
_Route = tuple[bytes, bytes, bool, "RouteStats | None"]
_NONE: Headers = []  # no extra headers (never mutated)
# RFC 9110 §15.5.6: a 405 names the methods the resource supports.
_ALLOW_POST: Headers = [(b"allow", b"POST")]
_ALLOW_GET: Headers = [(b"allow", b"GET, HEAD")]


class Proxy(Forwarder):
    """The router's HTTP handler: ``await proxy.handle(request, responder)``."""

    def __init__(
        self,
        state: RouterState,
        admission: Admission,
        balancer: Balancer[Worker],
        metrics: RouterMetrics,
        config: ProxyConfig,
    ) -> None:
        super().__init__(admission, balancer, metrics, config)
        self._state = state
        self._endpoints = Endpoints(state, metrics)
        self._other_stats = metrics.route("/v1/*")
        self._unknown_stats = metrics.route("other")
        self._judged_stats = {path: metrics.route(path.decode()) for path in JUDGED}
        # Request target -> its route (clients repeat a handful of targets; bounded).
        self._routes: dict[bytes, _Route] = {}

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
                status = responder.answer_error(MethodNotAllowed(), _ALLOW_POST)
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
                status = responder.answer_error(err, _NONE)
            else:
                return self._send(
                    stats, started, request, responder, request.path, request.body, group, _NONE, False
                )
        elif endpoint is not None:  # a GET endpoint asked with another method
            stats = endpoint[0]
            status = responder.answer_error(MethodNotAllowed(), _ALLOW_GET)
        else:
            stats = self._unknown_stats
            status = responder.answer_error(RouteNotFound(), _NONE)
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
            return responder.answer_error(ContractUnavailable(), _NONE)
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
            return responder.answer_error(err, extra)
        return body, group, extra, probe.stream is True

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


def _model_of(body: bytes) -> str | None:
    """The ``model`` of an unjudged body, if it is a JSON object that names one."""
    try:
        return probe_body(body).model
    except BadRequest:
        return None  # not a JSON object (e.g. an upload): routable only in a one-model fleet
