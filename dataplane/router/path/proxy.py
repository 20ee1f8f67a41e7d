"""The request path (SPEC §3.3, §5, §5.1).

Every request target is classified once (canonical path, ``contract.routes``) against the route
table built at start-up: a judged route's request is read (probe of its dialect) -> model lookup
-> the contract (inject / reject / allow) -> THEN admission -> pick a worker -> forward -> relay
the answer. A request refused by the contract (or malformed, or for an unknown model) never takes
a queue slot or reaches a worker. An unjudged route skips the contract and goes through the same
admission and forwarding; the router's own GET surface lives in ``endpoints``; every other path
is ``404 route_not_found`` (default-deny, SPEC §5.1). Requests are forwarded with the canonical
path, so what was judged is what the engine serves.

Forwarding, from admission on (the fast path through callbacks, the task path, retries), is the
base class's: ``forwarder.Forwarder``.
"""

from __future__ import annotations

from collections.abc import Coroutine
from time import perf_counter as _perf_counter
from typing import Any, Final

from dataplane.errors import (
    BadRequest,
    ContractUnavailable,
    MethodNotAllowed,
    ModelNotFound,
    NoHealthyWorkers,
    RouteNotFound,
    RouterError,
)
from dataplane.http import Deferred, Request, Responder
from dataplane.router.admission import Admission
from dataplane.router.balancer import DEFAULT_MAX_TOKENS, WORK_SHIFT, Balancer, request_work
from dataplane.router.body import RequestBody, SplicedBody
from dataplane.router.clients import ClientKeys, InvalidApiKey
from dataplane.router.contract.enforce import CompiledContract, judge
from dataplane.router.contract.form import probe_form
from dataplane.router.contract.probe import Probe, probe_body
from dataplane.router.contract.routes import Route, RouteTable, canonical_path, split_target
from dataplane.router.fleet.workers import Worker, WorkerSet
from dataplane.router.headers import Forwarded, Headers, end_to_end, without_credentials
from dataplane.router.metrics import RouterMetrics, RouteStats
from dataplane.router.path.endpoints import Endpoints
from dataplane.router.path.forwarder import Forwarder, ProxyConfig, forwarded_headers
from dataplane.router.state import ContractSet, RouterState

# Bound as a Final: compiled (scripts/build_mypyc.sh), an imported name is a lookup in the
# module's globals at every call.
perf_counter: Final = _perf_counter

_MAX_MODEL_IN_MESSAGE: Final = 200
_MAX_ROUTES: Final = 1024
# canonical path, the target to forward with (canonical path + query), the route (None: not
# in the table), its stats, whether it is open to clients without a key, whether the route
# serves POST
_Target = tuple[bytes, bytes, "Route | None", RouteStats, bool, bool]
_NONE: Final[Headers] = []  # no extra headers (never mutated)
# RFC 9110 §15.5.6: a 405 names the methods the resource supports.
_ALLOW_GET: Final[Headers] = [(b"allow", b"GET, HEAD")]
# RFC 9110 §11.6.1: a 401 carries a challenge naming the scheme (RFC 6750 §3: Bearer).
_CHALLENGE: Final[Headers] = [(b"www-authenticate", b'Bearer realm="fleetplane"')]
# Open without a key under --api-keys: what probes and scrapers read (as vLLM keeps every path
# outside /v1 open): liveness, readiness, metrics, and the applied contract and route table.
_OPEN_PATHS: Final = frozenset({b"/health", b"/readiness", b"/metrics", b"/contract"})
_POST: Final = b"POST"


class _Resolved:
    """A model named by a body, and its workers and contract as one worker set and one
    contract set resolve them (``Proxy._judge`` keeps the last: clients repeat their model)."""

    __slots__ = ("compiled", "contracts", "group", "model", "workers")

    def __init__(
        self,
        model: str,
        workers: WorkerSet | None,
        contracts: ContractSet | None,
        group: tuple[Worker, ...],
        compiled: CompiledContract | None,
    ) -> None:
        self.model = model
        self.workers = workers
        self.contracts = contracts
        self.group = group
        self.compiled = compiled


class Proxy(Forwarder):
    """The router's HTTP handler: ``await proxy.handle(request, responder)``."""

    def __init__(
        self,
        state: RouterState,
        admission: Admission,
        balancer: Balancer[Worker],
        metrics: RouterMetrics,
        config: ProxyConfig,
        routes: RouteTable,
        keys: ClientKeys | None = None,
        strip_credentials: bool = False,
    ) -> None:
        super().__init__(admission, balancer, metrics, config)
        self._state = state
        self._keys = keys
        # The client's own credentials never reach a worker once the router checks them or
        # sends its own (--api-keys, --worker-api-key).
        self._strip = strip_credentials or keys is not None
        self._table = routes
        self._endpoints = Endpoints(state, metrics, routes)
        self._unknown_stats = metrics.route("other")
        self._route_stats = {route.path: metrics.route(route.path) for route in routes.routes}
        # Request target -> its classification (clients repeat a handful of targets; bounded).
        self._targets: dict[bytes, _Target] = {}
        # The last target classified, and its classification: a request target is a new bytes
        # object per request, and comparing it with the last one costs less than hashing it.
        self._last_raw = b""
        self._last_target: _Target | None = None
        # The last model resolved: a body's model is a new str, hashed by each dict it is
        # looked up in (the worker index, the contract scopes); compared, it is not.
        self._resolved = _Resolved("", None, None, (), None)

    def handle(self, request: Request, responder: Responder) -> Coroutine[Any, Any, None] | Deferred | None:
        """Answer at once (refusals, GET surface), forward through callbacks (``DEFERRED``), or
        return the forwarding coroutine (queueing, connecting, h2c workers, retries).

        The HTTP server runs a returned coroutine as the request's task (``dataplane.http``).
        """
        started = perf_counter()
        raw_target = request.path
        target = self._last_target
        if target is None or raw_target != self._last_raw:
            target = self._targets.get(raw_target)
            if target is None:
                target = self._classify(raw_target)
            self._last_raw = raw_target
            self._last_target = target
        path, forward_to, route, stats, open_, posts = target
        method = request.method
        client = ""
        keys = self._keys
        if keys is not None and not open_:
            found = keys.client_of(request.headers)
            if found is None:
                stats.observe(
                    responder.answer_error(InvalidApiKey(), _CHALLENGE), perf_counter() - started, responder
                )
                return None
            client = found
            responder.client_name = found
        if route is not None:
            # A request's method is a new bytes object: compared with POST before it is hashed.
            if not (posts and method == _POST) and method not in route.methods:
                status = responder.answer_error(MethodNotAllowed(), route.allow)
            elif route.dialect is not None:
                judged = self._judge(stats, started, request, responder, forward_to, route, client)
                if not isinstance(judged, int):
                    return judged
                status = judged
            else:
                try:
                    _, group = self._group(_model_of(request.body))
                except RouterError as err:
                    status = responder.answer_error(err, _NONE)
                else:
                    return self._send(
                        stats,
                        started,
                        request,
                        responder,
                        forward_to,
                        request.body,
                        self._forwarded(request, False),
                        group,
                        _NONE,
                        False,
                        request_work(None, len(request.body) >> 2) if len(group) > 1 else 0,
                    )
        elif (endpoint := self._endpoints.get(path)) is not None:
            stats, answer = endpoint
            if method == b"GET" or method == b"HEAD":  # HEAD: the server sends the head only
                answered = answer(responder)
                if not isinstance(answered, int):  # /metrics of a --processes router (process_metrics)
                    return self._answer_later(stats, started, answered, responder)
                status = answered
            else:
                status = responder.answer_error(MethodNotAllowed(), _ALLOW_GET)
        else:
            status = responder.answer_error(RouteNotFound(), _NONE)
        stats.observe(status, perf_counter() - started, responder)
        return None

    async def _answer_later(
        self, stats: RouteStats, started: float, answer: Coroutine[Any, Any, int], responder: Responder
    ) -> None:
        stats.observe(await answer, perf_counter() - started, responder)

    def _classify(self, raw_target: bytes) -> _Target:
        """Classify a request target (SPEC §5.1): its canonical path, the target to forward it
        with, its route and the stats it is counted under."""
        path, query = split_target(raw_target)
        path = canonical_path(path)
        route = self._table.lookup(path)
        if route is not None:
            stats = self._route_stats[route.path]
        else:
            endpoint = self._endpoints.get(path)
            stats = endpoint[0] if endpoint is not None else self._unknown_stats
        target = (
            path,
            path + query,
            route,
            stats,
            route is None and path in _OPEN_PATHS,
            route is not None and _POST in route.methods,
        )
        targets = self._targets
        if len(targets) >= _MAX_ROUTES:
            targets.clear()  # a client cycling targets only makes it start over
        targets[raw_target] = target
        return target

    def route_name(self, raw_target: bytes) -> str:
        """The metrics route of a request target, for answers the HTTP server gives on its own
        (413, 400, 408, 431: SPEC §8 counts them too); the same names ``handle`` uses."""
        target = self._targets.get(raw_target) or self._classify(raw_target)
        return target[3].route

    def _judge(
        self,
        stats: RouteStats,
        started: float,
        request: Request,
        responder: Responder,
        forward_to: bytes,
        route: Route,
        client: str,
    ) -> Coroutine[Any, Any, None] | Deferred | int:
        """Probe, model lookup, contract (SPEC §3.3), then forward (``_send``) the body and
        headers that passed with the request's work (``balancer.request_work``: its
        ``max_tokens`` and prompt); or the status answered. Forwarded from here rather than
        handed back to ``handle``: a tuple of six per request saved."""
        contracts = self._state.contracts
        if contracts is None:
            return responder.answer_error(ContractUnavailable(), _NONE)
        extra = contracts.revision_headers
        dialect = route.dialect
        assert dialect is not None
        try:
            headers = self._forwarded(request, True)
            if dialect.form:
                probe: Probe = probe_form(request.body, request.header(b"content-type"), dialect)
            else:
                probe = probe_body(request.body, dialect)
            named = probe.model
            workers = self._state.workers
            last = self._resolved
            if (
                named is not None
                and last.workers is workers
                and last.contracts is contracts
                and last.model == named
            ):
                group = last.group
                compiled = last.compiled
            else:
                model, group = self._group(named)
                compiled = contracts.for_model(model)
                if named is not None:
                    self._resolved = _Resolved(named, workers, contracts, group, compiled)
            body: RequestBody = request.body
            if compiled is not None:
                judged = judge(compiled, probe, request.body, route.path)
                # The body's two types tested, each on its own: compiled, a type check each,
                # where the error class (not compiled) or a tuple of types is a generic
                # isinstance (~250 instructions per forwarded request).
                if isinstance(judged, bytes) or isinstance(judged, SplicedBody):  # noqa: SIM101
                    body = judged
                else:
                    self._state.count_rejection(
                        compiled.scope, judged.violated or (judged.param or "",), client
                    )
                    return responder.answer_error(judged, extra)
        except RouterError as err:
            return responder.answer_error(err, extra)
        if len(group) > 1:
            # balancer.request_work, inlined (the hot path): max_tokens and the prompt, packed.
            cap = probe.max_tokens
            work = ((DEFAULT_MAX_TOKENS if cap is None else cap) << WORK_SHIFT) + (len(request.body) >> 2)
        else:
            work = 0  # a model served by one worker is never scored: nothing to hold
        return self._send(
            stats,
            started,
            request,
            responder,
            forward_to,
            body,
            headers,
            group,
            extra,
            probe.stream is True,
            work,
        )

    def _forwarded(self, request: Request, judged: bool) -> Forwarded:
        """The request's headers as a worker gets them (``forwarded_headers``), without the
        client's own credentials when the router checks or sends its own."""
        if self._strip:
            return without_credentials(end_to_end(request.headers, judged=judged))
        return forwarded_headers(request, judged)

    def _group(self, model: str | None) -> tuple[str, tuple[Worker, ...]]:
        workers = self._state.workers
        if not workers.models:
            raise NoHealthyWorkers()  # no worker at all: nothing could take any model
        if model is None:
            model = workers.sole_model
            if model is None:
                raise BadRequest("model is required: this router serves several models")
        group = workers.group(model)
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
